/* region_churn.c: regions registered and forgotten between checkpoints,
 * and librex started twice, with the job's own SIGSEGV handler or none
 * (helper-101: under the mprotect tracker both killed the job).
 *
 * Usage: region_churn MODE [ITERATIONS]
 * MODE:
 *   unprotect      each iteration registers a small malloc(3) buffer (it
 *                  shares its pages with the heap, which librex's own
 *                  threads write), checkpoints, forgets it and frees it. A
 *                  write that faulted on a shared page while it was
 *                  protected and was handled after rex_unprotect
 *                  write-enabled it was taken for the job's: the process
 *                  died of SIGSEGV.
 *   unprotect-own  the same with the job's own SIGSEGV handler, installed
 *                  before rex_init: it was called for that fault.
 *   reinit         rex_init .. rex_finalize twice; between them the job
 *                  installs its own SIGSEGV handler (before the second
 *                  rex_init, as rex(3) asks): the tracked writes of the
 *                  second run went to it.
 *   chain          a crash reporter installed after rex_init passes what
 *                  it does not handle to the action it found (librex's),
 *                  then rex_finalize, rex_init again and a NULL write:
 *                  the process dies of SIGSEGV (helper-103: librex
 *                  installed itself over the reporter, the two passed the
 *                  fault to each other until the stack ran out). Exits 5
 *                  after 10 reporter calls.
 * Prints "ok" at the end; the job's handler exits 3 naming the fault.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rex.h"

static void own(int sig, siginfo_t *si, void *ctx)
{
    (void)sig;
    (void)ctx;
    char b[160];
    int n = snprintf(b, sizeof b, "region_churn: the job's own SIGSEGV handler got a fault at %p\n",
                     si->si_addr);
    if (n > 0 && write(2, b, (size_t)n) < 0)
        _exit(4);
    _exit(3);
}

static struct sigaction found;
static int reports;

static void reporter(int sig, siginfo_t *si, void *ctx)
{
    if (++reports > 10) {
        static const char m[] = "region_churn: the reporter was called 10 times\n";
        if (write(2, m, sizeof m - 1) < 0)
            _exit(4);
        _exit(5);
    }
    if (found.sa_flags & SA_SIGINFO)
        found.sa_sigaction(sig, si, ctx);
    else if (found.sa_handler != SIG_DFL && found.sa_handler != SIG_IGN)
        found.sa_handler(sig);
    else
        signal(SIGSEGV, SIG_DFL);
}

static void install_reporter(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = reporter;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigaction(SIGSEGV, &sa, &found);
}

static void install_own(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = own;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigaction(SIGSEGV, &sa, NULL);
}

static void check(const char *what, int rc)
{
    if (rc < 0) {
        fprintf(stderr, "region_churn: %s: %d %s\n", what, rc, rex_last_error());
        exit(1);
    }
}

static void churn(long iterations)
{
    check("init", rex_init(NULL));
    unsigned char *keep = malloc(3000);
    memset(keep, 1, 3000);
    check("protect 0", rex_protect(0, keep, 3000));
    for (long i = 0; i < iterations; i++) {
        size_t n = 50 + (size_t)(i * 977) % 5000;
        unsigned char *p = malloc(n);
        memset(p, (int)i, n);
        check("protect 1", rex_protect(1, p, n));
        keep[i % 3000]++;
        check("checkpoint", rex_checkpoint());
        check("unprotect 1", rex_unprotect(1));
        free(p);
    }
    check("wait", rex_checkpoint_wait());
    check("finalize", rex_finalize());
}

static void run_once(int k)
{
    check("init", rex_init(NULL));
    unsigned char *p = rex_alloc(1, 8192);
    if (!p)
        check("alloc", -1);
    uint64_t seq;
    int rc = rex_restart_test(&seq);
    check("restart_test", rc);
    if (rc == 1)
        check("restart", rex_restart());
    check("checkpoint", rex_checkpoint());
    p[10] = (unsigned char)k; /* a write fault the tracker takes */
    check("checkpoint", rex_checkpoint());
    check("finalize", rex_finalize());
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    long iterations = argc > 2 ? atol(argv[2]) : 300;
    if (!strcmp(argv[1], "unprotect")) {
        churn(iterations);
    } else if (!strcmp(argv[1], "unprotect-own")) {
        install_own();
        churn(iterations);
    } else if (!strcmp(argv[1], "chain")) {
        check("init", rex_init(NULL));
        install_reporter();
        unsigned char *p = rex_alloc(1, 8192);
        if (!p)
            check("alloc", -1);
        check("checkpoint", rex_checkpoint());
        p[10] = 1;
        check("checkpoint", rex_checkpoint());
        check("finalize", rex_finalize());
        run_once(3);
        volatile uintptr_t null_page = 16; /* the compiler cannot see it is NULL's page */
        *(volatile unsigned char *)null_page = 1;
    } else if (!strcmp(argv[1], "reinit")) {
        run_once(1);
        install_own();
        run_once(2);
    } else {
        return 2;
    }
    printf("ok\n");
    return 0;
}
