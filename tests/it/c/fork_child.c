/* fork_child.c: a job that forks while librex runs (rex(3): librex does
 * not follow a fork). The child writes registered memory, calls
 * rex_checkpoint, rex_checkpoint_wait and rex_finalize, which must each be
 * refused at once with REX_ESTATE (helper-80: rex_checkpoint waited for
 * ever on a writer thread the child does not have), and exits; the parent
 * keeps checkpointing, and its state is what a restart gives.
 *
 * Usage: fork_child write STATE   checkpoints around forks and saves the
 *                                 region at the last checkpoint in STATE;
 *        fork_child check STATE   restarts and compares with STATE.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rex.h"

#define CK(call)                                                              \
    do {                                                                      \
        int rc_ = (call);                                                     \
        if (rc_ < 0) {                                                        \
            fprintf(stderr, "fork_child: %s = %d: %s\n", #call, rc_,          \
                    rex_last_error());                                        \
            exit(3);                                                          \
        }                                                                     \
    } while (0)

#define PAGES 16

static int child(unsigned char *p, size_t len)
{
    alarm(20); /* a hang is a failure, not a stuck test */
    memset(p, 0xEE, len);
    int rcs[3] = {rex_checkpoint(), rex_checkpoint_wait(), rex_finalize()};
    for (int i = 0; i < 3; i++)
        if (rcs[i] != REX_ESTATE) {
            fprintf(stderr, "fork_child: child call %d = %d, not REX_ESTATE: %s\n", i, rcs[i],
                    rex_last_error());
            _exit(4);
        }
    if (strstr(rex_last_error(), "fork") == NULL) {
        fprintf(stderr, "fork_child: the child's error does not say fork: %s\n",
                rex_last_error());
        _exit(5);
    }
    exit(0); /* atexit and destructors run too */
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    long ps = sysconf(_SC_PAGESIZE);
    size_t len = PAGES * (size_t)ps;
    CK(rex_init(NULL));
    unsigned char *p = rex_alloc(0, len);
    if (p == NULL)
        return 3;
    if (strcmp(argv[1], "check") == 0) {
        uint64_t seq;
        if (rex_restart_test(&seq) != 1)
            return 6;
        CK(rex_restart());
        unsigned char *want = malloc(len);
        FILE *f = fopen(argv[2], "rb");
        if (!f || fread(want, 1, len, f) != len)
            return 7;
        fclose(f);
        int same = memcmp(want, p, len) == 0;
        CK(rex_finalize());
        return same ? 0 : 8;
    }
    for (int it = 0; it < 6; it++) {
        for (size_t k = 0; k < len; k += 97)
            p[k] = (unsigned char)(it * 31 + k);
        CK(rex_checkpoint());
        pid_t pid = fork();
        if (pid < 0)
            return 3;
        if (pid == 0)
            child(p, len);
        /* the parent writes while the child runs */
        p[(size_t)it * (size_t)ps] = (unsigned char)(0xA0 + it);
        int st;
        if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "fork_child: child of iteration %d: status %#x\n", it, st);
            return 9;
        }
    }
    CK(rex_checkpoint());
    CK(rex_checkpoint_wait());
    FILE *f = fopen(argv[2], "wb");
    if (!f || fwrite(p, 1, len, f) != len || fclose(f) != 0)
        return 2;
    CK(rex_finalize());
    return 0;
}
