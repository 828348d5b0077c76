/*
 * kv.c - a key-value table under random updates, checkpointed with librex.
 *
 *   kv NKEYS UPDATES EVERY OUT
 *
 * A table of NKEYS 64-byte entries (a u64 key and a 56-byte value) receives
 * UPDATES random updates; each rewrites one entry's value and bumps one
 * counter of a histogram. An L1 checkpoint is taken every EVERY updates
 * (0: never). At the end the table's bytes, then the histogram's, go to OUT.
 * Kill it at any time and run the same command again: it restarts from its
 * newest checkpoint and writes the same bytes.
 *
 * It shows the two ways of registering memory: rex_alloc (page-aligned,
 * allocated by the library) for the table and the state, and rex_protect on
 * memory the program allocated itself (the histogram, from malloc, so at no
 * particular alignment and sharing its first and last pages with other heap
 * data).
 *
 * The configuration comes from the environment (REX_L1 and REX_L2, or
 * REX_CONFIG naming a rex.toml), else ./rex.toml or /etc/rex/rex.toml.
 *
 * Build:  cc -O2 kv.c -Iinclude -Ltarget/release -lrexctl \
 *             -Wl,-rpath,$PWD/target/release -o kv
 * Run:    REX_L1=/tmp/l1 REX_L2=/tmp/l2 ./kv 100000 1000000 100000 out.bin
 */
#include <rex.h>

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Region ids: they name the regions in the checkpoints, so a restarted run
 * must register the same ids with the same sizes. */
enum { REGION_STATE = 0, REGION_TABLE = 1, REGION_COUNTS = 2 };

#define VALUE_BYTES 56
#define NCOUNTS 3000 /* 24000 bytes of counters: several pages */

struct entry {
    uint64_t key;
    unsigned char value[VALUE_BYTES];
};

/* Everything besides the table and the histogram that a restart needs. */
struct state {
    uint64_t i;   /* updates done so far */
    uint64_t rng; /* xorshift64* state, never 0 */
};

/* Reports a failed rex_* call and exits. */
static void die(const char *call, int rc)
{
    fprintf(stderr, "kv: %s: %s: %s\n", call, rex_strerror(rc), rex_last_error());
    exit(1);
}

/* rex_alloc returns NULL rather than a code; rex_last_error says why. */
static void *alloc_or_die(int id, size_t size)
{
    void *p = rex_alloc(id, size);
    if (p == NULL) {
        fprintf(stderr, "kv: rex_alloc: region %d: %s\n", id, rex_last_error());
        exit(1);
    }
    return p;
}

static void usage(void)
{
    fprintf(stderr, "usage: kv NKEYS UPDATES EVERY OUT\n"
                    "  NKEYS    entries in the table (64 bytes each)\n"
                    "  UPDATES  random updates to apply\n"
                    "  EVERY    checkpoint every EVERY updates (0: never)\n"
                    "  OUT      file receiving the table, then the %d u64 counters\n",
            NCOUNTS);
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

/* xorshift64* (Vigna). The state is in a checkpointed region, so a restarted
 * run draws the same numbers as an uninterrupted one. */
static uint64_t next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * UINT64_C(0x2545F4914F6CDD1D);
}

/* An entry's value after an update that drew x. */
static void fill_value(unsigned char *value, uint64_t x)
{
    for (int k = 0; k < VALUE_BYTES; k++)
        value[k] = (unsigned char)((x >> (8 * (k % 8))) + (uint64_t)k);
}

/* Writes the parts to OUT.tmp, then renames it to OUT. */
static void write_output(const char *out, const void *a, size_t a_size, const void *b,
                         size_t b_size)
{
    size_t len = strlen(out) + sizeof ".tmp";
    char *tmp = malloc(len);
    if (tmp == NULL) {
        perror("kv: malloc");
        exit(1);
    }
    snprintf(tmp, len, "%s.tmp", out);
    FILE *f = fopen(tmp, "wb");
    if (f == NULL || fwrite(a, 1, a_size, f) != a_size || fwrite(b, 1, b_size, f) != b_size ||
        fclose(f) != 0) {
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
    uint64_t nkeys = parse_u64(argv[1]);
    uint64_t updates = parse_u64(argv[2]);
    uint64_t every = parse_u64(argv[3]);
    const char *out = argv[4];
    if (nkeys == 0 || nkeys > SIZE_MAX / sizeof(struct entry))
        usage();
    size_t table_bytes = (size_t)nkeys * sizeof(struct entry);
    size_t counts_bytes = NCOUNTS * sizeof(uint64_t);
    int rc;

    /* NULL: take the configuration from REX_* / REX_CONFIG / rex.toml. */
    if ((rc = rex_init(NULL)) != REX_OK)
        die("rex_init", rc);

    /* Library-allocated regions: page-aligned, zeroed, already registered. */
    struct state *st = alloc_or_die(REGION_STATE, sizeof *st);
    struct entry *table = alloc_or_die(REGION_TABLE, table_bytes);

    /* A region the program allocated itself: any address and size will do.
     * calloc, so that a fresh start begins with zero counts. */
    uint64_t *counts = calloc(NCOUNTS, sizeof *counts);
    if (counts == NULL) {
        perror("kv: calloc");
        return 1;
    }
    if ((rc = rex_protect(REGION_COUNTS, counts, counts_bytes)) != REX_OK)
        die("rex_protect", rc);

    /* Restart or start fresh. rex_restart must come right after the
     * regions are registered, before any checkpoint of this run. */
    uint64_t seq;
    rc = rex_restart_test(&seq);
    if (rc < 0)
        die("rex_restart_test", rc);
    if (rc == 1) {
        /* Fills st, the table and the counts with the newest valid state. */
        if ((rc = rex_restart()) != REX_OK)
            die("rex_restart", rc);
        fprintf(stderr, "kv: restarted from seq %" PRIu64 " at update %" PRIu64 "\n", seq,
                st->i);
    } else {
        st->i = 0;
        st->rng = UINT64_C(0x9E3779B97F4A7C15);
        for (uint64_t k = 0; k < nkeys; k++) {
            table[k].key = k;
            /* The value stays zero but for its first 8 bytes. */
            uint64_t pattern = k * UINT64_C(0x9E3779B97F4A7C15);
            memcpy(table[k].value, &pattern, sizeof pattern);
        }
    }

    /*
     * Where rex_dirty comes in. After a checkpoint the registered pages are
     * write-protected, and the library notices the program's first write to
     * each page through the fault it takes. The kernel's writes take no
     * fault: read(2) or recv(2) into a protected page fails with EFAULT. So
     * a program that read new values straight into the table, say
     *
     *     struct entry *e = &table[k];
     *     if ((rc = rex_dirty(e, sizeof *e)) != REX_OK)
     *         die("rex_dirty", rc);
     *     if (read(fd, e, sizeof *e) != (ssize_t)sizeof *e)
     *         ...
     *
     * declares the range first: rex_dirty marks its pages dirty (they go in
     * the next checkpoint) and write-enables them. Copying with memcpy from
     * a buffer of one's own needs nothing: that write faults like any other.
     * This example reads nothing, to stay deterministic.
     */

    while (st->i < updates) {
        uint64_t x = next(&st->rng);
        fill_value(table[x % nkeys].value, x);
        counts[(x >> 32) % NCOUNTS]++;
        st->i++;

        /* A consistent state: the update is complete. The first checkpoint
         * is FULL, the later ones hold only the pages written since the
         * previous one. The file is written in the background. */
        if (every != 0 && st->i % every == 0) {
            if ((rc = rex_checkpoint()) != REX_OK)
                die("rex_checkpoint", rc);
        }
    }

    /* Let the background writer (and any L2 push) finish. */
    if ((rc = rex_checkpoint_wait()) != REX_OK)
        die("rex_checkpoint_wait", rc);

    write_output(out, table, table_bytes, counts, counts_bytes);

    /* Forget the malloc'ed region before handing it back to malloc, which
     * writes into the freed block and its neighbours. */
    if ((rc = rex_unprotect(REGION_COUNTS)) != REX_OK)
        die("rex_unprotect", rc);
    free(counts);

    /* Stops the background threads and releases the L1 directory's lock. */
    if ((rc = rex_finalize()) != REX_OK)
        die("rex_finalize", rc);
    return 0;
}
