/* whole.c: a job whose input reaches registered memory where no write
 * tracking sees it, registered with rex_protect_flags(..., REX_WHOLE), as a
 * job would register a buffer a device writes (RDMA, io_uring fixed
 * buffers): a read(2) into it with no rex_dirty (which fails with EFAULT on
 * memory the mprotect tracker protects), then a write through
 * /proc/self/mem, which bypasses the page protection as a device's DMA does
 * (the mprotect tracker does not see it).
 *
 * It also asks rex_region_tracker how each region is watched, and prints
 * the tracked region's ("region 2: NAME").
 *
 * Usage: whole INPUT OUT
 *   INPUT  a file of at least 3 * 4096 + 100 bytes, read into the region
 *   OUT    written with the region's bytes as its last checkpoint has them
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rex.h"

#define SIZE (3 * 4096 + 100)

static void die(const char *call, int rc)
{
    fprintf(stderr, "whole: %s: %s: %s\n", call, rex_strerror(rc), rex_last_error());
    exit(1);
}

static void fail(const char *what)
{
    perror(what);
    exit(1);
}

int main(int argc, char **argv)
{
    int rc;
    if (argc != 3) {
        fprintf(stderr, "usage: whole INPUT OUT\n");
        return 2;
    }
    /* Any alignment: the region starts 8 bytes into a heap block. */
    unsigned char *block = malloc(SIZE + 64);
    if (!block)
        fail("malloc");
    unsigned char *region = block + 8;
    memset(region, 1, SIZE);

    if ((rc = rex_init(NULL)) != REX_OK)
        die("rex_init", rc);
    if ((rc = rex_protect_flags(1, region, SIZE, 0x80)) != REX_EINVAL) {
        fprintf(stderr, "whole: unknown flags gave %d, not REX_EINVAL\n", rc);
        return 1;
    }
    if ((rc = rex_protect_flags(1, region, SIZE, REX_WHOLE)) != REX_OK)
        die("rex_protect_flags", rc);
    unsigned char *tracked = rex_alloc(2, 4096);
    if (!tracked)
        die("rex_alloc", REX_EINVAL);
    tracked[0] = 7;
    /* How each region is watched: region 1 whole, region 2 by the tracker
     * rex.toml names (auto: the one it chose), no region 3. */
    const char *t1 = rex_region_tracker(1), *t2 = rex_region_tracker(2);
    const char *want = getenv("REX_TRACKER") ? getenv("REX_TRACKER") : "auto";
    if (!t1 || strcmp(t1, "whole") != 0 || !t2 || rex_region_tracker(3) != NULL ||
        (strcmp(want, "auto") == 0 ? strcmp(t2, "userfaultfd") != 0 && strcmp(t2, "mprotect") != 0
                                   : strcmp(t2, want) != 0)) {
        fprintf(stderr, "whole: regions watched as %s, %s (tracker %s)\n", t1 ? t1 : "NULL",
                t2 ? t2 : "NULL", want);
        return 1;
    }
    printf("region 2: %s\n", t2);
    if ((rc = rex_checkpoint()) != REX_OK)
        die("rex_checkpoint", rc);

    /* The kernel writes the region: no rex_dirty before it. */
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0)
        fail(argv[1]);
    size_t done = 0;
    while (done < SIZE) {
        ssize_t n = read(fd, region + done, SIZE - done);
        if (n <= 0)
            fail("read into the region");
        done += (size_t)n;
    }
    close(fd);
    if ((rc = rex_checkpoint()) != REX_OK)
        die("rex_checkpoint", rc);

    /* A write past the page protection, as a device's. */
    int mem = open("/proc/self/mem", O_RDWR);
    if (mem < 0)
        fail("/proc/self/mem");
    if (pwrite(mem, "device", 6, (off_t)(uintptr_t)(region + 4096 + 5)) != 6)
        fail("write through /proc/self/mem");
    close(mem);
    tracked[1] = 8;
    if ((rc = rex_checkpoint()) != REX_OK)
        die("rex_checkpoint", rc);
    if ((rc = rex_checkpoint_wait()) != REX_OK)
        die("rex_checkpoint_wait", rc);

    FILE *out = fopen(argv[2], "wb");
    if (!out || fwrite(region, 1, SIZE, out) != SIZE || fclose(out) != 0)
        fail(argv[2]);
    if ((rc = rex_finalize()) != REX_OK)
        die("rex_finalize", rc);
    free(block);
    return 0;
}
