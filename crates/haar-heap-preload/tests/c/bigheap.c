/* An unmodified program as haar run --heap meets it: it knows nothing of the pool. It mallocs
 * 1 GiB (half in 1 MiB pieces, half in one block), writes and checks every byte, grows the
 * block with realloc, takes aligned blocks and calloc'ed ones, then reports where its memory
 * is: the resident size of the mappings of files in $HAAR_HEAP_FILE's directory (from
 * /proc/self/smaps), the named file's allocated size, and the process's anonymous (DRAM
 * heap) RSS. Exit 0 only if every check
 * passed. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static long kb_field(const char *file, const char *key) {
    FILE *f = fopen(file, "r");
    char line[512];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, strlen(key))) { v = atol(line + strlen(key)); break; }
    if (f) fclose(f);
    return v;
}

/* Rss of every mapping of a file in `path`'s directory (the pool, or a private pool made
 * there, which shows as DIR/#inode (deleted)) in /proc/self/smaps, in KiB. */
static long mapping_rss_kb(const char *pool) {
    char path[4096] = "";
    if (pool) {
        snprintf(path, sizeof path, "%s", pool);
        char *slash = strrchr(path, '/');
        if (slash) slash[1] = 0;
    }
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[4096];
    int in = 0;
    long sum = 0;
    while (f && fgets(line, sizeof line, f)) {
        int hex = (line[0] >= '0' && line[0] <= '9') || (line[0] >= 'a' && line[0] <= 'f');
        if (hex && strchr(line, '-')) { /* a mapping's header line */
            in = pool && strstr(line, path) != NULL;
        } else if (in && !strncmp(line, "Rss:", 4)) {
            sum += atol(line + 4);
        }
    }
    if (f) fclose(f);
    return sum;
}

#define FAIL(...) do { printf(__VA_ARGS__); printf("\n"); return 1; } while (0)

int main(void) {
    const size_t piece = 1 << 20, half = (size_t)512 << 20, n = half / piece;
    unsigned char **pieces = malloc(n * sizeof *pieces);
    if (!pieces) FAIL("malloc of the table failed");
    for (size_t i = 0; i < n; i++) {
        if (!(pieces[i] = malloc(piece))) FAIL("malloc of piece %zu failed: errno %d", i, errno);
        memset(pieces[i], (int)(i * 31 + 7), piece);
    }
    unsigned char *block = malloc(half);
    if (!block) FAIL("malloc of 512 MiB failed: errno %d", errno);
    for (size_t i = 0; i < half; i++) block[i] = (unsigned char)(i ^ (i >> 13));
    /* Read back from memory, not from what the compiler knows was written. */
    __asm__ volatile("" : : : "memory");
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < piece; j++)
            if (pieces[i][j] != (unsigned char)(i * 31 + 7)) FAIL("piece %zu byte %zu changed", i, j);
    for (size_t i = 0; i < half; i++)
        if (block[i] != (unsigned char)(i ^ (i >> 13))) FAIL("block byte %zu changed", i);
    block = realloc(block, half + (64 << 20));
    if (!block) FAIL("realloc failed: errno %d", errno);
    for (size_t i = 0; i < half; i++)
        if (block[i] != (unsigned char)(i ^ (i >> 13))) FAIL("byte %zu lost by realloc", i);
    void *a2m = NULL, *a64 = NULL;
    if (posix_memalign(&a2m, 2 << 20, 3 << 20) || ((uintptr_t)a2m & ((2 << 20) - 1)))
        FAIL("posix_memalign 2 MiB failed");
    if (posix_memalign(&a64, 64, 1000) || ((uintptr_t)a64 & 63)) FAIL("posix_memalign 64 failed");
    if (malloc_usable_size(a2m) < (3 << 20)) FAIL("usable size of the aligned block too small");
    memset(a2m, 1, 3 << 20);
    void *al = aligned_alloc(4096, 8192), *ml = memalign(256, 100), *va = valloc(10);
    if (!al || !ml || !va || ((uintptr_t)al & 4095) || ((uintptr_t)ml & 255) || ((uintptr_t)va & 4095))
        FAIL("aligned_alloc/memalign/valloc wrong");
    unsigned long *z = calloc(1 << 20, sizeof *z);
    for (size_t i = 0; z && i < (1 << 20); i++) if (z[i]) FAIL("calloc not zero at %zu", i);
    int *arr = reallocarray(NULL, 1000, sizeof(int));
    if (!arr || reallocarray(arr, SIZE_MAX / 2, 4) != NULL || errno != ENOMEM)
        FAIL("reallocarray overflow not refused");

    const char *pool = getenv("HAAR_HEAP_FILE");
    struct stat st;
    long file_kb = pool && stat(pool, &st) == 0 ? (long)st.st_blocks / 2 : 0;
    printf("pool_rss_kb=%ld file_kb=%ld anon_kb=%ld\n", mapping_rss_kb(pool), file_kb,
           kb_field("/proc/self/status", "RssAnon:"));
    for (size_t i = 0; i < n; i++) free(pieces[i]);
    free(pieces); free(block); free(a2m); free(a64); free(al); free(ml); free(va); free(z); free(arr);
    printf("bigheap ok\n");
    return 0;
}
