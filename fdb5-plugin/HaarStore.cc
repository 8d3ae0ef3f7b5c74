// haar as an FDB5 store: FDB5 keeps its TOC catalogue (listing, wipe and purge work as
// FDB5's own), and the field bytes go into a haar store through libhaar's C ABI.
//
// Loaded by FDB5 itself: eckit's plugin manager dlopen()s libhaar-fdb5.so when LOAD_PLUGINS
// names `int.haar.haar-fdb5` and PLUGINS_MANIFEST_PATH holds its manifest
// (scripts/fdb5-plugin-env.sh prints both); the FDB5 configuration then says `store: haar`
// and `haarConfig: <haar YAML>`. See docs/design.md, "haar as an FDB5 store".
//
// Each field archived is keyed by haar itself (ecCodes, with the schema of the haar store)
// and its location is the URI `haar:<complete key>`: the key is all a reader needs, and it
// is what `haar list` and `haar retrieve` show, so a field written by `fdb-write` is found
// by haar's own tools. This file must not keep bytes or keys of its own: the haar store is
// the only place the data lives.
//
// With `engine: haar` (HaarCatalogue.cc, the haar engine) FDB5's catalogue is haar's too: the
// store then only holds each field's bytes for the length of FDB5's call to the catalogue's
// archive (archiveCb), which names the field by FDB5's key.

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "eckit/config/Resource.h"
#include "eckit/exception/Exceptions.h"
#include "eckit/filesystem/PathName.h"
#include "eckit/filesystem/URI.h"
#include "eckit/filesystem/URIManager.h"
#include "eckit/io/DataHandle.h"
#include "eckit/log/Log.h"
#include "eckit/serialisation/Reanimator.h"
#include "eckit/system/Plugin.h"

#include "fdb5/LibFdb5.h"
#include "fdb5/config/Config.h"
#include "fdb5/database/Field.h"
#include "fdb5/database/FieldLocation.h"
#include "fdb5/database/Key.h"
#include "fdb5/database/Store.h"
#include "fdb5/database/WipeState.h"

#include "HaarPlugin.h"

namespace haar_fdb5 {

static const char* const kScheme = "haar";

// ---------------------------------------------------------------------------------------------
// One libhaar handle per haar configuration, shared by every store of the process (a haar_t
// serialises its callers, and opening one reads the configuration and the schema).

[[noreturn]] static void fail(const std::string& what) {
    throw eckit::SeriousBug("haar: " + what + ": " + haar_last_error(), Here());
}

class Handles {
public:

    static Handles& instance() {
        static Handles theOne;
        return theOne;
    }

    /// The handle of `configPath` ("" = libhaar's choice from the environment: $HAAR_CONFIG).
    haar_t* get(const std::string& configPath) {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = handles_.find(configPath);
        if (it != handles_.end()) {
            return it->second;
        }
        haar_t* h = nullptr;
        if (haar_open(configPath.empty() ? nullptr : configPath.c_str(), &h) != HAAR_OK) {
            fail("cannot open the haar store of configuration '" + configPath + "'");
        }
        handles_[configPath] = h;
        if (last_.empty()) {
            last_ = configPath;
        }
        return h;
    }

    /// The configuration of the first store opened in this process, for readers that hold a
    /// location only (a list element's data handle): FDB5 builds no store for them.
    std::string defaultConfig() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (!last_.empty()) {
                return last_;
            }
        }
        return fdb5::LibFdb5::instance().defaultConfig().getString("haarConfig", "");
    }

private:

    Handles() = default;
    // Handles are never closed: FDB5 tears its stores down from static destructors, after
    // which libhaar may be gone; every handle is flushed by its stores before that.

    std::mutex mutex_;
    std::map<std::string, haar_t*> handles_;
    std::string last_;
};

haar_t* sharedHandle(const std::string& configPath) {
    return Handles::instance().get(configPath);
}

PendingField& pendingField() {
    thread_local PendingField pending;
    return pending;
}

static std::string configOf(const fdb5::Config& config) {
    return config.getString("haarConfig", "");
}

// ---------------------------------------------------------------------------------------------
// Reading one field: the bytes of `haar_retrieve(key)`.

/// The request naming exactly the field `key`: the key without its empty optional keywords
/// (`levelist=` of a surface field), which haar's request language refuses as values but
/// matches when left out.
static std::string requestOf(const std::string& key) {
    std::string out;
    size_t start = 0;
    while (start <= key.size()) {
        size_t end = key.find(',', start);
        if (end == std::string::npos) {
            end = key.size();
        }
        std::string pair = key.substr(start, end - start);
        if (!pair.empty() && pair.back() != '=') {
            out += out.empty() ? "" : ",";
            out += pair;
        }
        start = end + 1;
    }
    return out;
}

class HaarDataHandle : public eckit::DataHandle {
public:

    HaarDataHandle(std::string key, eckit::Length length) : key_(requestOf(key)), length_(length) {}
    ~HaarDataHandle() override { close(); }

    void print(std::ostream& s) const override { s << "HaarDataHandle[" << key_ << "]"; }

    eckit::Length openForRead() override {
        close();
        haar_t* h = Handles::instance().get(Handles::instance().defaultConfig());
        if (haar_retrieve(h, key_.c_str(), &reader_) != HAAR_OK) {
            fail("retrieve " + key_);
        }
        uint64_t size = 0;
        haar_reader_size(reader_, &size);
        return eckit::Length(size);
    }

    long read(void* buf, long len) override {
        ASSERT(reader_);
        size_t n = 0;
        if (haar_reader_read(reader_, buf, static_cast<size_t>(len), &n) != HAAR_OK) {
            fail("read " + key_);
        }
        return static_cast<long>(n);
    }

    void close() override {
        if (reader_) {
            haar_reader_free(reader_);
            reader_ = nullptr;
        }
    }

    eckit::Length size() override { return length_; }
    eckit::Length estimate() override { return length_; }
    bool canSeek() const override { return true; }

    eckit::Offset position() override {
        uint64_t at = 0;
        if (reader_) {
            haar_reader_tell(reader_, &at);
        }
        return eckit::Offset(at);
    }

    eckit::Offset seek(const eckit::Offset& o) override {
        ASSERT(reader_);
        if (haar_reader_seek(reader_, static_cast<uint64_t>(static_cast<long long>(o))) != HAAR_OK) {
            fail("seek " + key_);
        }
        return o;
    }

    void skip(const eckit::Length& n) override {
        seek(position() + eckit::Offset(static_cast<long long>(n)));
    }

    std::string title() const override { return std::string(kScheme) + ":" + key_; }

private:

    std::string key_;
    eckit::Length length_;
    haar_reader_t* reader_ = nullptr;
};

// ---------------------------------------------------------------------------------------------
// The location of a field: `haar:<complete key>`, offset 0, its length.

class HaarFieldLocation : public fdb5::FieldLocation {
public:

    explicit HaarFieldLocation(const eckit::URI& uri) : FieldLocation(uri) {}
    HaarFieldLocation(const eckit::URI& uri, eckit::Offset offset, eckit::Length length,
                      const fdb5::Key& remapKey) :
        FieldLocation(uri, offset, length, remapKey) {}
    explicit HaarFieldLocation(eckit::Stream& s) : FieldLocation(s) {}
    HaarFieldLocation(const HaarFieldLocation& o) : FieldLocation(o.uri_, o.offset_, o.length_, o.remapKey_) {}

    eckit::DataHandle* dataHandle() const override { return new HaarDataHandle(uri_.name(), length_); }

    std::shared_ptr<const fdb5::FieldLocation> make_shared() const override {
        return std::make_shared<HaarFieldLocation>(*this);
    }

    void visit(fdb5::FieldLocationVisitor& visitor) const override { visitor(*this); }

    static const eckit::ClassSpec& classSpec() { return classSpec_; }

protected:

    const eckit::ReanimatorBase& reanimator() const override { return reanimator_; }
    void encode(eckit::Stream& s) const override { FieldLocation::encode(s); }

    static eckit::ClassSpec classSpec_;
    static eckit::Reanimator<HaarFieldLocation> reanimator_;

private:

    void print(std::ostream& out) const override {
        out << "HaarFieldLocation[uri=" << uri_ << ",length=" << length_ << "]";
    }
};

eckit::ClassSpec HaarFieldLocation::classSpec_ = {&fdb5::FieldLocation::classSpec(), "HaarFieldLocation"};
eckit::Reanimator<HaarFieldLocation> HaarFieldLocation::reanimator_;
static fdb5::FieldLocationBuilder<HaarFieldLocation> locationBuilder(kScheme);

// `haar:` URIs parse as a scheme and a name (no authority, query or fragment: keys hold
// none of `/?#` that matter), and open through the same reader.
class HaarURIManager : public eckit::URIManager {
public:

    HaarURIManager() : URIManager(kScheme) {}

    bool exists(const eckit::URI& uri) override {
        haar_t* h = Handles::instance().get(Handles::instance().defaultConfig());
        haar_list_t* it = nullptr;
        if (haar_list(h, requestOf(uri.name()).c_str(), &it) != HAAR_OK) {
            return false;
        }
        bool found = haar_list_next(it) == HAAR_OK;
        haar_list_free(it);
        return found;
    }
    eckit::DataHandle* newWriteHandle(const eckit::URI&) override { NOTIMP; }
    eckit::DataHandle* newReadHandle(const eckit::URI& uri) override { return new HaarDataHandle(uri.name(), 0); }
    eckit::DataHandle* newReadHandle(const eckit::URI& uri, const eckit::OffsetList&,
                                     const eckit::LengthList& lengths) override {
        return new HaarDataHandle(uri.name(), lengths.empty() ? eckit::Length(0) : lengths.front());
    }
    std::string asString(const eckit::URI& uri) const override { return std::string(kScheme) + ":" + uri.name(); }
    // Not a file: FDB5's TOC statistics and purge ask for a path to tell its own data files
    // from adopted ones; a key is never under a TOC database's directory, so FDB5 leaves the
    // bytes alone and `haar purge` reclaims them.
    eckit::PathName path(const eckit::URI& uri) const override { return eckit::PathName(asString(uri)); }
};

static HaarURIManager uriManager;

// ---------------------------------------------------------------------------------------------
// The store.

class HaarStore : public fdb5::Store {
public:

    HaarStore(const fdb5::Key& key, const fdb5::Config& config) :
        config_(configOf(config)), dbKey_(std::string(key)), engine_(isHaarEngine(config)) {}
    HaarStore(const eckit::URI& uri, const fdb5::Config& config) :
        config_(configOf(config)), dbKey_(uri.name()), engine_(isHaarEngine(config)) {}

    ~HaarStore() override {
        try {
            flush();
        }
        catch (...) {
        }
    }

    /// The store a field's URI belongs to: one for every haar field, so that a wipe groups
    /// all of them under one store (the key names the database; haar finds it).
    static eckit::URI uri(const eckit::URI& /*dataURI*/) { return eckit::URI(kScheme, eckit::PathName("store")); }

    std::string type() const override { return kScheme; }
    bool open() override { return true; }
    void close() override {}
    bool exists() const override { return true; }
    void checkUID() const override {}

    size_t flush() override {
        if (archived_ == 0) {
            return 0;
        }
        if (haar_flush(handle()) != HAAR_OK) {
            fail("flush");
        }
        size_t n = archived_;
        archived_ = 0;
        return n;
    }

    std::unique_ptr<const fdb5::FieldLocation> archive(const fdb5::Key& /*idxKey*/, const void* data,
                                                       eckit::Length length) override {
        char key[4096];
        size_t keyLen = 0;
        if (haar_archive_grib_message(handle(), data, static_cast<size_t>(length), key, sizeof key, &keyLen) !=
            HAAR_OK) {
            fail("archive of a field of the database " + dbKey_);
        }
        ++archived_;
        return std::make_unique<HaarFieldLocation>(eckit::URI(kScheme, eckit::PathName(std::string(key, keyLen))),
                                                   eckit::Offset(0), length, fdb5::Key());
    }

    /// With `engine: haar` (HaarCatalogue.cc) the bytes reach haar once, through the catalogue:
    /// FDB5 calls the catalogue's archive from `catalogueArchive` with the datum key, and the
    /// catalogue takes the bytes kept aside here (pendingField) under FDB5's complete key, so
    /// haar does not key the message with ecCodes. With another engine (toc), archive() keys it.
    void archiveCb(const fdb5::Key& idxKey, const void* data, eckit::Length length,
                   std::function<void(const std::unique_ptr<const fdb5::FieldLocation> fieldLocation)>
                       catalogueArchive) override {
        if (!engine_) {
            catalogueArchive(archive(idxKey, data, length));
            return;
        }
        PendingField& pending = pendingField();
        ASSERT(!pending.data);
        pending.data = data;
        pending.length = static_cast<size_t>(length);
        try {
            catalogueArchive(std::make_unique<HaarFieldLocation>(
                eckit::URI(kScheme, eckit::PathName(kPendingName)), eckit::Offset(0), length, fdb5::Key()));
        }
        catch (...) {
            pending = PendingField();
            throw;
        }
        bool taken = pending.data == nullptr;
        pending = PendingField();
        if (!taken) {
            throw eckit::SeriousBug("HaarStore: the catalogue of " + dbKey_ +
                                        " did not take the field's bytes (engine: haar needs the haar catalogue)",
                                    Here());
        }
    }

    eckit::DataHandle* retrieve(fdb5::Field& field) const override { return field.dataHandle(); }

    void remove(const eckit::URI& uri, std::ostream& logAlways, std::ostream& logVerbose,
                bool doit) const override {
        logVerbose << "remove: ";
        logAlways << uri << std::endl;
        if (doit) {
            wipeKey(uri.name());
        }
    }

    void print(std::ostream& out) const override { out << "HaarStore[" << dbKey_ << "]"; }

    eckit::URI uri() const override { return uri(eckit::URI()); }
    bool uriBelongs(const eckit::URI& uri) const override { return uri.scheme() == kScheme; }
    bool uriExists(const eckit::URI& uri) const override { return uriManager.exists(uri); }
    std::set<eckit::URI> collocatedDataURIs() const override { return {}; }
    std::set<eckit::URI> asCollocatedDataURIs(const std::set<eckit::URI>& uris) const override { return uris; }
    std::vector<eckit::URI> getAuxiliaryURIs(const eckit::URI&, bool) const override { return {}; }

    void finaliseWipeState(fdb5::StoreWipeState& state, bool, bool) override {
        for (const auto& uri : state.includedDataURIs()) {
            if (!uriBelongs(uri)) {
                throw eckit::SeriousBug("HaarStore: the index to wipe names a field outside haar: " + uri.asString() +
                                            "; wipe aborted so that no field leaks",
                                        Here());
            }
        }
    }
    bool doWipeUnknowns(const std::set<eckit::URI>&) const override { return true; }
    bool doWipeURIs(const fdb5::StoreWipeState& state) const override {
        for (const auto& uri : state.includedDataURIs()) {
            wipeKey(uri.name());
        }
        return true;
    }
    void doWipeEmptyDatabase() const override {}
    bool doUnsafeFullWipe() const override { return false; }

private:

    haar_t* handle() const { return Handles::instance().get(config_); }

    void wipeKey(const std::string& key) const {
        if (haar_wipe(handle(), requestOf(key).c_str(), 1, nullptr) != HAAR_OK) {
            fail("wipe " + key);
        }
    }

    static bool isHaarEngine(const fdb5::Config& config) { return config.getString("engine", "") == kScheme; }

    std::string config_;
    std::string dbKey_;
    bool engine_;  // FDB5's catalogue is haar's (engine: haar): see archiveCb
    size_t archived_ = 0;
};

static fdb5::StoreBuilder<HaarStore> storeBuilder(kScheme);

// ---------------------------------------------------------------------------------------------
// The eckit plugin: what LibraryManager registers when it dlopen()s this library.

class HaarPlugin : public eckit::system::Plugin {
public:

    HaarPlugin() : Plugin("haar-fdb5", "haar-fdb5") {}
    std::string version() const override { return haar_version(); }
    std::string gitsha1(unsigned int) const override { return "unknown"; }
};

static HaarPlugin plugin;

}  // namespace haar_fdb5
