/*
 * heat.c - a 2-D heat (Jacobi) stencil that checkpoints itself with librex.
 *
 *   heat N STEPS EVERY OUT
 *
 * Relaxes an N x N grid of doubles for STEPS steps, takes an L1 checkpoint
 * every EVERY steps (0: never), and writes the final grid (N*N raw doubles,
 * native byte order) to OUT. Kill it at any time and run the same command
 * again: it restarts from its newest checkpoint and writes the same bytes it
 * would have written without the interruption.
 *
 * The configuration comes from the environment (REX_L1 and REX_L2, or
 * REX_CONFIG naming a rex.toml), else ./rex.toml or /etc/rex/rex.toml.
 *
 * Build:  cc -O2 heat.c -Iinclude -Ltarget/release -lrexctl \
 *             -Wl,-rpath,$PWD/target/release -o heat
 * Run:    REX_L1=/tmp/l1 REX_L2=/tmp/l2 ./heat 256 2000 50 out.bin
 */
#include <rex.h>

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Region ids: they name the regions in the checkpoints, so a restarted run
 * must register the same ids with the same sizes. */
enum { REGION_STATE = 0, REGION_GRID_A = 1, REGION_GRID_B = 2 };

/* Everything besides the grids that a restart needs. It lives in a
 * registered region too, so it is checkpointed with the grids. */
struct state {
    uint64_t step; /* steps done so far */
    uint64_t cur;  /* 0: grid A holds the current values, 1: grid B */
};

/* Reports a failed rex_* call and exits. */
static void die(const char *call, int rc)
{
    fprintf(stderr, "heat: %s: %s: %s\n", call, rex_strerror(rc), rex_last_error());
    exit(1);
}

/* rex_alloc returns NULL rather than a code; rex_last_error says why. */
static void *alloc_or_die(int id, size_t size)
{
    void *p = rex_alloc(id, size);
    if (p == NULL) {
        fprintf(stderr, "heat: rex_alloc: region %d: %s\n", id, rex_last_error());
        exit(1);
    }
    return p;
}

static void usage(void)
{
    fprintf(stderr, "usage: heat N STEPS EVERY OUT\n"
                    "  N      grid size (N x N doubles, N >= 3)\n"
                    "  STEPS  Jacobi steps to run\n"
                    "  EVERY  checkpoint every EVERY steps (0: never)\n"
                    "  OUT    file receiving the final grid (N*N*8 bytes)\n");
    exit(2);
}

static uint64_t parse_u64(const char *s)
{
    char *end;
    if (*s < '0' || *s > '9')
        usage();
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0')
        usage();
    return (uint64_t)v;
}

/* Fixed boundary (top edge 100, the other edges 0) and a deterministic
 * interior pattern. Both grids get the boundary: steps never write it. */
static void init_grid(double *g, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < n; j++) {
            double v;
            if (i == 0)
                v = 100.0;
            else if (i == n - 1 || j == 0 || j == n - 1)
                v = 0.0;
            else
                v = (double)((i * 7 + j * 13) % 17);
            g[i * n + j] = v;
        }
    }
}

/* One Jacobi step: every interior point of `to` becomes the mean of its four
 * neighbours in `from`. Same operations in the same order on every run. */
static void jacobi(double *to, const double *from, size_t n)
{
    for (size_t i = 1; i < n - 1; i++)
        for (size_t j = 1; j < n - 1; j++)
            to[i * n + j] = 0.25 * (from[(i - 1) * n + j] + from[(i + 1) * n + j] +
                                    from[i * n + j - 1] + from[i * n + j + 1]);
}

/* Writes OUT.tmp, then renames it to OUT, so OUT is never half written. */
static void write_output(const char *out, const void *data, size_t size)
{
    size_t len = strlen(out) + sizeof ".tmp";
    char *tmp = malloc(len);
    if (tmp == NULL) {
        perror("heat: malloc");
        exit(1);
    }
    snprintf(tmp, len, "%s.tmp", out);
    FILE *f = fopen(tmp, "wb");
    if (f == NULL || fwrite(data, 1, size, f) != size || fclose(f) != 0) {
        perror(tmp);
        exit(1);
    }
    if (rename(tmp, out) != 0) {
        perror(out);
        exit(1);
    }
    free(tmp);
}

int main(int argc, char **argv)
{
    if (argc != 5)
        usage();
    uint64_t n64 = parse_u64(argv[1]);
    uint64_t steps = parse_u64(argv[2]);
    uint64_t every = parse_u64(argv[3]);
    const char *out = argv[4];
    if (n64 < 3 || n64 > SIZE_MAX / sizeof(double) / n64)
        usage();
    size_t n = (size_t)n64;
    size_t grid_bytes = n * n * sizeof(double);
    int rc;

    /* NULL: take the configuration from REX_* / REX_CONFIG / rex.toml. */
    if ((rc = rex_init(NULL)) != REX_OK)
        die("rex_init", rc);

    /* Register the memory to checkpoint. rex_alloc returns page-aligned,
     * zeroed memory that is already registered under the given id. */
    struct state *st = alloc_or_die(REGION_STATE, sizeof *st);
    double *grid[2];
    grid[0] = alloc_or_die(REGION_GRID_A, grid_bytes);
    grid[1] = alloc_or_die(REGION_GRID_B, grid_bytes);

    /* Restart or start fresh. rex_restart must come right after the
     * regions are registered, before any checkpoint of this run. */
    uint64_t seq;
    rc = rex_restart_test(&seq);
    if (rc < 0)
        die("rex_restart_test", rc);
    if (rc == 1) {
        /* Fills st and both grids with the newest valid checkpoint. */
        if ((rc = rex_restart()) != REX_OK)
            die("rex_restart", rc);
        fprintf(stderr, "heat: restarted from seq %" PRIu64 " at step %" PRIu64 "\n", seq,
                st->step);
    } else {
        st->step = 0;
        st->cur = 0;
        init_grid(grid[0], n);
        init_grid(grid[1], n);
    }

    while (st->step < steps) {
        jacobi(grid[st->cur ^ 1], grid[st->cur], n);
        st->cur ^= 1;
        st->step++;

        /* A consistent state: the step is complete and st says which grid is
         * current. The first checkpoint is FULL, the later ones hold only
         * the pages written since the previous one. The program stops only
         * while the dirty pages are copied; the file is written in the
         * background (and pushed to L2 in the background when it is due). */
        if (every != 0 && st->step % every == 0) {
            if ((rc = rex_checkpoint()) != REX_OK)
                die("rex_checkpoint", rc);
        }
    }

    /* Let the background writer (and any L2 push) finish. */
    if ((rc = rex_checkpoint_wait()) != REX_OK)
        die("rex_checkpoint_wait", rc);

    write_output(out, grid[st->cur], grid_bytes);

    /* Stops the background threads and releases the L1 directory's lock. */
    if ((rc = rex_finalize()) != REX_OK)
        die("rex_finalize", rc);
    return 0;
}
