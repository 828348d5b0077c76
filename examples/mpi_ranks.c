/*
 * mpi_ranks.c - an MPI job whose ranks share part of their state, and that
 * checkpoints itself with librex.
 *
 *   mpirun -np N mpi_ranks PAGES STEPS EVERY OUTPREFIX
 *
 * Every rank holds a table of PAGES pages of 64-bit words. The first three
 * quarters are the same on every rank (a replicated table, updated the same
 * way everywhere); the last quarter is the rank's own. Each step rewrites a
 * few pages of both parts; every EVERY steps all ranks checkpoint
 * (rex_checkpoint is collective in an MPI job). At the end rank R writes its
 * table to OUTPREFIX.R. Kill it at any time (one rank is enough: mpirun stops
 * the others) and run the same command again: every rank restarts from the
 * newest checkpoint all of them have, and writes the same bytes.
 *
 * The shared pages are stored once in L2, by one rank, and referenced by
 * the others (rexctl's collective push). Configuration from the
 * environment: REX_L1 (rank R uses REX_L1/R) and REX_L2 (the job's
 * location). For tests: CRASH_RANK=R CRASH_STEP=S makes rank R kill itself
 * (SIGKILL) before step S.
 *
 * Build:  mpicc -O2 mpi_ranks.c -Iinclude -Ltarget/release -lrexctl \
 *             -Wl,-rpath,$PWD/target/release -o mpi_ranks
 *         (librexctl built with `cargo build --release --features mpi`)
 */
#include <mpi.h>
#include <rex.h>

#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { REGION_STATE = 0, REGION_TABLE = 1 };

struct state {
    uint64_t step; /* steps done */
};

static int rank;

static void die(const char *call, int rc)
{
    fprintf(stderr, "mpi_ranks: rank %d: %s: %s: %s\n", rank, call, rex_strerror(rc),
            rex_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* splitmix64: a deterministic word from a seed. */
static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static void fill(uint64_t *page, size_t words, uint64_t seed)
{
    for (size_t w = 0; w < words; w++)
        page[w] = mix(seed ^ (w * 0x100000001b3ULL));
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc != 5) {
        if (rank == 0)
            fprintf(stderr, "usage: mpi_ranks PAGES STEPS EVERY OUTPREFIX\n");
        MPI_Finalize();
        return 2;
    }
    size_t pages = strtoull(argv[1], NULL, 10);
    uint64_t steps = strtoull(argv[2], NULL, 10);
    uint64_t every = strtoull(argv[3], NULL, 10);
    const char *crash_rank = getenv("CRASH_RANK");
    const char *crash_step = getenv("CRASH_STEP");
    long ps = sysconf(_SC_PAGESIZE);
    size_t words = (size_t)ps / 8;
    size_t shared = pages * 3 / 4, own = pages - shared;

    int rc = rex_init_comm(NULL, MPI_Comm_c2f(MPI_COMM_WORLD));
    if (rc != REX_OK)
        die("rex_init_comm", rc);
    struct state *st = rex_alloc(REGION_STATE, sizeof *st);
    uint64_t *table = rex_alloc(REGION_TABLE, pages * (size_t)ps);
    if (st == NULL || table == NULL)
        die("rex_alloc", REX_ENOMEM);
    uint64_t seq;
    rc = rex_restart_test(&seq);
    if (rc == 1) {
        if ((rc = rex_restart()) != REX_OK)
            die("rex_restart", rc);
        printf("mpi_ranks: rank %d restarted from seq %" PRIu64 " at step %" PRIu64 "\n", rank,
               seq, st->step);
    } else if (rc == 0) {
        for (size_t p = 0; p < pages; p++)
            fill(table + p * words, words,
                 p < shared ? mix(p) : mix(p ^ ((uint64_t)rank << 40)));
    } else {
        die("rex_restart_test", rc);
    }
    for (; st->step < steps;) {
        if (crash_rank && crash_step && atoi(crash_rank) == rank &&
            strtoull(crash_step, NULL, 10) == st->step)
            raise(SIGKILL);
        uint64_t s = st->step;
        for (uint64_t k = 0; k < 4; k++) {
            size_t p = mix(s * 8 + k) % shared; /* the same on every rank */
            fill(table + p * words, words, mix(s ^ (p << 20)));
            size_t q = shared + mix((s * 8 + k) ^ ((uint64_t)rank << 32)) % own;
            fill(table + q * words, words, mix(s ^ (q << 20) ^ ((uint64_t)rank << 48)));
        }
        st->step = s + 1;
        if (every > 0 && st->step % every == 0 && (rc = rex_checkpoint()) != REX_OK)
            die("rex_checkpoint", rc);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s.%d", argv[4], rank);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(table, (size_t)ps, pages, f) != pages || fclose(f) != 0) {
        perror(path);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if ((rc = rex_finalize()) != REX_OK)
        die("rex_finalize", rc);
    MPI_Finalize();
    return 0;
}
