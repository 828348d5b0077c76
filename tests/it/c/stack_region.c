/* stack_region.c: a region in main's stack frame ("a stack frame that
 * outlives the checkpoints", rex(3)). Its first and last pages are shared
 * with live frames: deeper calls write the page below it, main's own
 * locals the one above, so write faults there happen with the stack
 * pointer inside a write-protected page.
 *
 * Usage: stack_region write STATE   takes two checkpoints, writing the
 *                                   region and the frames around it, and
 *                                   saves the region's state at the last
 *                                   checkpoint in STATE;
 *        stack_region check STATE   restarts and compares the region with
 *                                   STATE. Exit 0 when all went well.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rex.h"

#define CK(call)                                                              \
    do {                                                                      \
        int rc_ = (call);                                                     \
        if (rc_ < 0) {                                                        \
            fprintf(stderr, "stack_region: %s = %d: %s\n", #call, rc_,        \
                    rex_last_error());                                        \
            exit(3);                                                          \
        }                                                                     \
    } while (0)

#define LEN (3 * 4096 + 100)

static int save(const char *path, const unsigned char *p)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, LEN, f) != LEN || fclose(f) != 0) {
        perror(path);
        return 2;
    }
    return 0;
}

static int compare(const char *path, const unsigned char *p)
{
    static unsigned char want[LEN];
    FILE *f = fopen(path, "rb");
    if (!f || fread(want, 1, LEN, f) != LEN) {
        perror(path);
        return 2;
    }
    fclose(f);
    if (memcmp(want, p, LEN) != 0) {
        fprintf(stderr, "stack_region: the restored region differs\n");
        return 1;
    }
    return 0;
}

/* A frame below main's: its locals share the region's lowest page. */
static __attribute__((noinline)) int work(unsigned char *s, const char *state)
{
    volatile unsigned char deep[3000];
    deep[0] = 1;
    deep[2999] = 2;
    memset(s, 1, LEN);
    CK(rex_checkpoint());
    s[100] = 5;
    s[LEN - 1] = 6;
    deep[5] = 3;
    CK(rex_checkpoint());
    CK(rex_checkpoint_wait());
    return save(state, s) + deep[0] + deep[2999] - 3 + deep[5] - 3;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: stack_region write|check STATE\n");
        return 2;
    }
    volatile int above = 7;
    unsigned char st[LEN];
    CK(rex_init(NULL));
    CK(rex_protect(0, st, sizeof st));
    int rc;
    if (strcmp(argv[1], "check") == 0) {
        uint64_t seq = 0;
        if (rex_restart_test(&seq) != 1) {
            fprintf(stderr, "stack_region: nothing to restart from\n");
            return 4;
        }
        CK(rex_restart());
        above++;
        rc = compare(argv[2], st);
    } else {
        rc = work(st, argv[2]);
        above++;
    }
    CK(rex_finalize());
    return rc + above - 8;
}
