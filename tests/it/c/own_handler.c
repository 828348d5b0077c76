/* own_handler.c: a job's own SIGSEGV dispositions, set before rex_init,
 * behave with librex as without it (librex's handler passes on what is not
 * its own). The tests run each mode with and without librex and compare the
 * outcomes: exit status, or the signal that ended the process, and output.
 *
 * Usage: own_handler USE_REX MODE   (USE_REX 0: without librex)
 * MODE:
 *   guard         a handler (SA_NODEFER) catches three reads of a guard
 *                 page the job made unreadable inside a registered region,
 *                 leaving by siglongjmp without restoring the mask; then
 *                 writes librex tracks. Prints "probes caught: 3".
 *   resethand     a crash reporter (SA_RESETHAND) logs a bad write and
 *                 returns: the fault comes again and the default action
 *                 ends the process (SIGSEGV), never a loop.
 *   kill-ignored  SIGSEGV ignored, a kill(2) of SIGSEGV: nothing happens,
 *                 tracked writes go on. Prints "alive".
 *   kill-default  the default action, a kill(2) of SIGSEGV: the process
 *                 ends (within a second: another thread may take it),
 *                 "alive" is never printed.
 *   sigwait       not SIGSEGV: the job blocks SIGUSR1 and SIGTERM after
 *                 rex_init and collects them with sigtimedwait (librex's
 *                 threads, started before, must not take them). Prints
 *                 "waited for 2 signals".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "rex.h"

static sigjmp_buf jb;
static volatile sig_atomic_t caught;

static void on_guard(int sig, siginfo_t *si, void *ctx)
{
    (void)sig;
    (void)si;
    (void)ctx;
    caught++;
    siglongjmp(jb, 1);
}

static void on_crash(int sig)
{
    (void)sig;
    static const char msg[] = "crash reported\n";
    if (write(1, msg, sizeof msg - 1) < 0)
        _exit(3);
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
    if (argc != 3) {
        fprintf(stderr, "usage: own_handler USE_REX MODE\n");
        return 2;
    }
    int use = atoi(argv[1]) != 0;
    const char *mode = argv[2];
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    setvbuf(stdout, NULL, _IONBF, 0);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    if (strcmp(mode, "guard") == 0) {
        sa.sa_sigaction = on_guard;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    } else if (strcmp(mode, "resethand") == 0) {
        sa.sa_handler = on_crash;
        sa.sa_flags = SA_RESETHAND;
    } else if (strcmp(mode, "kill-ignored") == 0) {
        sa.sa_handler = SIG_IGN;
    } else if (strcmp(mode, "kill-default") == 0 || strcmp(mode, "sigwait") == 0) {
        sa.sa_handler = SIG_DFL;
    } else {
        fprintf(stderr, "own_handler: unknown mode %s\n", mode);
        return 2;
    }
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

    if (strcmp(mode, "guard") == 0) {
        /* A guard page of the job's own, read three times. */
        if (mprotect(m + 4096, 4096, PROT_NONE) != 0) {
            perror("mprotect");
            return 1;
        }
        for (volatile int i = 0; i < 3; i++) {
            if (sigsetjmp(jb, 0) == 0) {
                volatile unsigned char x = ((volatile unsigned char *)m)[4096 + 10];
                (void)x;
            }
        }
        if (mprotect(m + 4096, 4096, PROT_READ | PROT_WRITE) != 0) {
            perror("mprotect");
            return 1;
        }
        printf("probes caught: %d\n", (int)caught);
    } else if (strcmp(mode, "sigwait") == 0) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGUSR1);
        sigaddset(&set, SIGTERM);
        if (sigprocmask(SIG_BLOCK, &set, NULL) != 0) {
            perror("sigprocmask");
            return 1;
        }
        ((volatile unsigned char *)m)[2 * 4096] = 1; /* tracked */
        if (use)
            check("rex_checkpoint", rex_checkpoint());
        kill(getpid(), SIGUSR1);
        kill(getpid(), SIGTERM);
        struct timespec wait = {5, 0};
        int got = 0;
        for (int i = 0; i < 2; i++)
            got += sigtimedwait(&set, NULL, &wait) > 0;
        printf("waited for %d signals\n", got);
    } else if (strcmp(mode, "resethand") == 0) {
        ((volatile unsigned char *)m)[2 * 4096] = 1; /* tracked */
        volatile uintptr_t bad = 16;
        *(volatile int *)bad = 1; /* the bug */
        printf("survived a bad write\n");
    } else {
        ((volatile unsigned char *)m)[2 * 4096] = 1; /* tracked */
        kill(getpid(), SIGSEGV);
        /* A signal sent to a process with several threads (librex's) may be
         * taken by another thread, as POSIX allows: the default action then
         * ends the process a moment after kill() returned here, not before.
         * Wait for it: "alive" means the signal was swallowed. */
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += 1;
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR)
            ;
        printf("alive\n");
    }
    /* Writes librex tracks (a fault under the mprotect tracker). */
    ((volatile unsigned char *)m)[5 * 4096] = 1;
    ((volatile unsigned char *)m)[6 * 4096] = 2;
    if (use) {
        check("rex_checkpoint", rex_checkpoint());
        check("rex_checkpoint_wait", rex_checkpoint_wait());
        check("rex_finalize", rex_finalize());
    }
    return 0;
}
