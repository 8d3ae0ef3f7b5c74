/* Allocates 1 MiB pieces until malloc returns NULL, then asks twice more: prints how much it
 * got and the errno of the failure. A full pool must look like this to a program: NULL and
 * ENOMEM, no crash. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(void) {
    size_t got = 0;
    void *p;
    while ((p = malloc(1 << 20)) != NULL) { memset(p, 1, 1 << 20); got++; }
    int e = errno;
    void *again = malloc(1 << 20), *big = malloc((size_t)1 << 30);
    printf("got_mib=%zu errno=%d again_null=%d\n", got, e, again == NULL && big == NULL);
    void *small = malloc(16); /* may still fit in a partly used page */
    (void)small;
    return 0;
}
