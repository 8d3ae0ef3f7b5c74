// haar: LD_PRELOAD shim for the fdb5lib 5.25 wheel's tools, built by bench/fdb5_plugin_bench.py
// --mode hammer with `c++ -O2 -shared -fPIC ... -ldl` (no FDB5 headers: the symbols are named by
// their mangled names, found with `nm -D --defined-only libfdb5.so`).
//
// Makes FDB5's backend free, to measure the ceiling any backend (Store, Catalogue or whole
// engine) could give a client such as fdb-hammer:
//   fdb5::FDB::archive(const Key&, const void*, size_t)  no-op (counted): MessageArchiver hands
//                                                         each decoded message to it, and below
//                                                         it are only the schema split, the
//                                                         catalogue and the store;
//   fdb5::FDB::flush()                                    no-op (counted).
// The other FDB::archive overloads and FDB::retrieve are passed on to libfdb5.so (dlsym
// RTLD_NEXT), counted, and FDB::retrieve timed, so a run shows which boundary it crossed.
// libfdb5.so calls all of these through its PLT (R_X86_64_JUMP_SLOT), so this interposes calls
// from inside libfdb5.so (MessageArchiver) as well as from the tool.
// At exit one line goes to stderr:
//   haar-backend-free: archive_key=N bytes=B flush=F archive_other=O retrieve=R retrieve_s=S
//                      save=V save_s=T
// eckit::DataHandle::saveInto(DataHandle&, TransferWatcher&) is passed on and timed (outermost
// call only): fdb-hammer --read copies the retrieved handle (a MultiHandle, which does not
// override it; libeckit's vtables name it by symbol, R_X86_64_64) into a null handle, so this
// is the time of all the store's reads.
#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <dlfcn.h>

namespace {
std::atomic<unsigned long> n_key{0}, n_bytes{0}, n_flush{0}, n_other{0}, n_retrieve{0};
std::atomic<unsigned long> retrieve_ns{0}, n_save{0}, save_ns{0};
thread_local int save_depth = 0;

double now() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

template <class F> F next(const char* name) {
    void* p = dlsym(RTLD_NEXT, name);
    if (!p) {
        std::fprintf(stderr, "haar-backend-free: %s not found after the shim\n", name);
        std::abort();
    }
    return reinterpret_cast<F>(p);
}

struct Report {
    ~Report() {
        std::fprintf(stderr,
                     "haar-backend-free: archive_key=%lu bytes=%lu flush=%lu archive_other=%lu "
                     "retrieve=%lu retrieve_s=%.6f save=%lu save_s=%.6f\n",
                     n_key.load(), n_bytes.load(), n_flush.load(), n_other.load(),
                     n_retrieve.load(), retrieve_ns.load() * 1e-9, n_save.load(),
                     save_ns.load() * 1e-9);
    }
} report;
}  // namespace

extern "C" {

// fdb5::FDB::archive(fdb5::Key const&, void const*, unsigned long)
void _ZN4fdb53FDB7archiveERKNS_3KeyEPKvm(void*, const void*, const void*, std::size_t length) {
    n_key++;
    n_bytes += length;
}

// fdb5::FDB::flush()
void _ZN4fdb53FDB5flushEv(void*) { n_flush++; }

// fdb5::FDB::archive(eckit::message::Message): passed on (it decodes the key, client work).
// Message is not trivially copyable, so the caller passes it by address.
void _ZN4fdb53FDB7archiveEN5eckit7message7MessageE(void* self, void* msg) {
    static auto f = next<void (*)(void*, void*)>("_ZN4fdb53FDB7archiveEN5eckit7message7MessageE");
    n_other++;
    f(self, msg);
}

// fdb5::FDB::archive(eckit::DataHandle&)
void _ZN4fdb53FDB7archiveERN5eckit10DataHandleE(void* self, void* dh) {
    static auto f = next<void (*)(void*, void*)>("_ZN4fdb53FDB7archiveERN5eckit10DataHandleE");
    n_other++;
    f(self, dh);
}

// fdb5::FDB::archive(void const*, unsigned long)
void _ZN4fdb53FDB7archiveEPKvm(void* self, const void* data, std::size_t length) {
    static auto f = next<void (*)(void*, const void*, std::size_t)>("_ZN4fdb53FDB7archiveEPKvm");
    n_other++;
    f(self, data, length);
}

// fdb5::FDB::archive(metkit::mars::MarsRequest const&, eckit::DataHandle&)
void _ZN4fdb53FDB7archiveERKN6metkit4mars11MarsRequestERN5eckit10DataHandleE(void* self,
                                                                               const void* req,
                                                                               void* dh) {
    static auto f = next<void (*)(void*, const void*, void*)>(
        "_ZN4fdb53FDB7archiveERKN6metkit4mars11MarsRequestERN5eckit10DataHandleE");
    n_other++;
    f(self, req, dh);
}

// fdb5::FDB::retrieve(metkit::mars::MarsRequest const&) -> eckit::DataHandle*: passed on, timed.
void* _ZN4fdb53FDB8retrieveERKN6metkit4mars11MarsRequestE(void* self, const void* req) {
    static auto f =
        next<void* (*)(void*, const void*)>("_ZN4fdb53FDB8retrieveERKN6metkit4mars11MarsRequestE");
    n_retrieve++;
    double t = now();
    void* dh = f(self, req);
    retrieve_ns += static_cast<unsigned long>((now() - t) * 1e9);
    return dh;
}

// eckit::DataHandle::saveInto(eckit::DataHandle&, eckit::TransferWatcher&) -> eckit::Length.
// eckit::Length holds one long long but has a user-written copy constructor, so it is returned
// through a hidden pointer; Len has the same layout and the same non-trivial copy, hence the
// same calling convention.
struct Len {
    long long v;
    Len(long long x) : v(x) {}
    Len(const Len& o) : v(o.v) {}
};

Len _ZN5eckit10DataHandle8saveIntoERS0_RNS_15TransferWatcherE(void* self, void* out,
                                                              void* watcher) {
    static auto f = next<Len (*)(void*, void*, void*)>(
        "_ZN5eckit10DataHandle8saveIntoERS0_RNS_15TransferWatcherE");
    if (save_depth++ > 0) {
        Len n = f(self, out, watcher);
        save_depth--;
        return n;
    }
    n_save++;
    double t = now();
    Len n = f(self, out, watcher);
    save_ns += static_cast<unsigned long>((now() - t) * 1e9);
    save_depth--;
    return n;
}
}
