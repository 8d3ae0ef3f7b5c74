/* haar: LD_AUDIT shim for the fdb5lib wheel's fdb-hammer, built by
 * crates/haar-bench/src/table8/fdb_hammer.rs (include_str!) and bench/fdb5_plugin_bench.py.
 * Makes the main program's PT_GNU_RELRO writable again after relocation, before the
 * libraries' constructors run: libeckit.so constructs eckit::EmptyHandle::reanimator_ in
 * fdb-hammer's .data.rel.ro copy of it, and its destructor writes there too at exit, so
 * the range stays writable. */
#define _GNU_SOURCE
#include <link.h>
#include <stdint.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>

static uintptr_t hi;

unsigned int la_version(unsigned int v) { (void)v; return LAV_CURRENT; }

void la_activity(uintptr_t *cookie, unsigned int flag) {
    (void)cookie;
    if (flag != LA_ACT_CONSISTENT || hi != 0) return;
    const ElfW(Phdr) *ph = (const ElfW(Phdr) *)getauxval(AT_PHDR);
    unsigned long n = getauxval(AT_PHNUM), k;
    uintptr_t bias = 0, pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    for (k = 0; k < n; k++)
        if (ph[k].p_type == PT_PHDR) bias = (uintptr_t)ph - ph[k].p_vaddr;
    for (k = 0; k < n; k++)
        if (ph[k].p_type == PT_GNU_RELRO) {
            uintptr_t a = (bias + ph[k].p_vaddr) & ~(pg - 1);
            uintptr_t e = (bias + ph[k].p_vaddr + ph[k].p_memsz + pg - 1) & ~(pg - 1);
            if (mprotect((void *)a, e - a, PROT_READ | PROT_WRITE) == 0) hi = e;
        }
}
