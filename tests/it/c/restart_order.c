/* restart_order.c: the order of calls around a restart. The first run
 * registers region 1 and checkpoints it; the second registers region 1,
 * tests the restart, then tries to register regions 2 (rex_protect) and 3
 * (rex_alloc) before rex_restart: a call out of order, REX_ESTATE (it was
 * REX_EINVAL, which rex(3) keeps for bad arguments), after which the
 * restart goes on and gives region 1 its checkpointed bytes.
 *
 * Usage: restart_order first|second OUT (OUT is unused; the test harness
 * passes it)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rex.h"

static void die(const char *call, int rc)
{
    fprintf(stderr, "restart_order: %s: %s: %s\n", call, rex_strerror(rc), rex_last_error());
    exit(1);
}

int main(int argc, char **argv)
{
    static unsigned char region[2 * 4096];
    static unsigned char other[4096];
    int rc;
    if (argc != 3)
        return 2;
    if ((rc = rex_init(NULL)) != REX_OK)
        die("rex_init", rc);
    if ((rc = rex_protect(1, region, sizeof region)) != REX_OK)
        die("rex_protect", rc);
    if (strcmp(argv[1], "first") == 0) {
        memset(region, 0x5a, sizeof region);
        if ((rc = rex_checkpoint()) != REX_OK)
            die("rex_checkpoint", rc);
        if ((rc = rex_finalize()) != REX_OK)
            die("rex_finalize", rc);
        return 0;
    }
    uint64_t seq = 0;
    if ((rc = rex_restart_test(&seq)) != 1)
        die("rex_restart_test", rc);
    if ((rc = rex_protect(2, other, sizeof other)) != REX_ESTATE) {
        fprintf(stderr, "restart_order: rex_protect between the test and the restart gave %d\n", rc);
        return 1;
    }
    if (rex_alloc(3, 4096) != NULL || strstr(rex_last_error(), "rex_restart_test") == NULL) {
        fprintf(stderr, "restart_order: rex_alloc between the test and the restart: %s\n",
                rex_last_error());
        return 1;
    }
    if ((rc = rex_restart()) != REX_OK)
        die("rex_restart", rc);
    for (size_t i = 0; i < sizeof region; i++)
        if (region[i] != 0x5a) {
            fprintf(stderr, "restart_order: byte %zu is %d after the restart\n", i, region[i]);
            return 1;
        }
    if ((rc = rex_finalize()) != REX_OK)
        die("rex_finalize", rc);
    printf("ok\n");
    return 0;
}
