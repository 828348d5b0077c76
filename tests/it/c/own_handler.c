/* own_handler.c: a job with its own SIGSEGV handler, installed before
 * rex_init, that catches reads of a guard page it made unreadable inside a
 * registered region and leaves them with siglongjmp. The handler is
 * SA_NODEFER and its sigsetjmp does not save the mask, so the job relies on
 * the kernel's rule: SIGSEGV is not blocked in it. librex's handler passes
 * such faults on: they must reach the job's handler every time, with the
 * mask the kernel would have given it, and the writes librex tracks must
 * still work after them.
 *
 * Usage: own_handler USE_REX   (0: without librex, for comparison)
 * Prints "probes caught: N" (N = 3 when right) and exits 0.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "rex.h"

static sigjmp_buf jb;
static volatile sig_atomic_t caught;

static void on_segv(int sig, siginfo_t *si, void *ctx)
{
    (void)sig;
    (void)si;
    (void)ctx;
    caught++;
    siglongjmp(jb, 1);
}

static void check(const char *call, int rc)
{
    if (rc != REX_OK) {
        fprintf(stderr, "own_handler: %s: %s: %s\n", call, rex_strerror(rc), rex_last_error());
        exit(1);
    }
}

int main(int argc, char **argv)
{
    int use = argc > 1 && atoi(argv[1]) != 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, NULL) != 0) {
        perror("sigaction");
        return 1;
    }
    if (use)
        check("rex_init", rex_init(NULL));
    unsigned char *m = mmap(NULL, 8 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    memset(m, 5, 8 * 4096);
    if (use) {
        check("rex_protect", rex_protect(1, m, 8 * 4096));
        check("rex_checkpoint", rex_checkpoint());
    }
    /* A guard page of the job's own, read three times. */
    if (mprotect(m + 4096, 4096, PROT_NONE) != 0) {
        perror("mprotect");
        return 1;
    }
    for (int i = 0; i < 3; i++) {
        if (sigsetjmp(jb, 0) == 0) {
            volatile unsigned char x = ((volatile unsigned char *)m)[4096 + 10];
            (void)x;
        }
    }
    if (mprotect(m + 4096, 4096, PROT_READ | PROT_WRITE) != 0) {
        perror("mprotect");
        return 1;
    }
    /* Writes librex tracks (a fault under the mprotect tracker). */
    ((volatile unsigned char *)m)[5 * 4096] = 1;
    ((volatile unsigned char *)m)[6 * 4096] = 2;
    if (use) {
        check("rex_checkpoint", rex_checkpoint());
        check("rex_checkpoint_wait", rex_checkpoint_wait());
        check("rex_finalize", rex_finalize());
    }
    printf("probes caught: %d\n", (int)caught);
    return 0;
}
