// The haar engine: FDB5's Catalogue over haar's catalogue, so that FDB5's clients (fdb-list,
// fdb-axes, fdb-read, pyfdb 5.25) see every field of a haar store, whoever wrote it (haar
// archive, Python haar.FDB, libhaar, or FDB5 through the Store plugin). Chosen by the FDB5
// configuration `engine: haar` with `store: haar` and `haarConfig: <haar YAML>`. See
// docs/design.md §17, "A haar engine".
//
// The reader lists, gives axes, dumps and retrieves; the writer archives through FDB5 into haar
// once, under FDB5's key. Every other Catalogue operation (wipe, purge, stats, move, control,
// overlay, adopt) throws an eckit::UserError naming the operation and the haar configuration:
// nothing here succeeds without doing the work. It keeps no keys or bytes of its own beyond
// one database's listing while a catalogue is open: haar's catalogue is the only index.
//
// Keys are split into database / index / datum by FDB5's own schema (Schema::expand, the
// path FDB5's archive takes), never by this file: haar's schema is FDB5's (`haar schema
// --fdb5`), so the split is the one FDB5 would have made had it archived the field.

#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "eckit/exception/Exceptions.h"
#include "eckit/filesystem/PathName.h"
#include "eckit/filesystem/URI.h"
#include "eckit/log/Log.h"
#include "eckit/serialisation/Reanimator.h"
#include "eckit/serialisation/Stream.h"

#include "metkit/mars/MarsRequest.h"

#include "fdb5/config/Config.h"
#include "fdb5/database/Catalogue.h"
#include "fdb5/database/DbStats.h"
#include "fdb5/database/Engine.h"
#include "fdb5/database/EntryVisitMechanism.h"
#include "fdb5/database/Field.h"
#include "fdb5/database/FieldLocation.h"
#include "fdb5/database/Index.h"
#include "fdb5/database/IndexLocation.h"
#include "fdb5/database/IndexStats.h"
#include "fdb5/database/Key.h"
#include "fdb5/database/WipeState.h"
#include "fdb5/database/WriteVisitor.h"
#include "fdb5/rules/Rule.h"
#include "fdb5/rules/Schema.h"

#include "HaarPlugin.h"

namespace haar_fdb5 {

static const char* const kEngine = "haar";

static std::string configOf(const fdb5::Config& config) {
    return config.getString("haarConfig", "");
}

/// The refusal of an operation the haar engine does not do (yet): an error the user sees,
/// naming the operation, the haar configuration and haar's own way of doing it.
[[noreturn]] static void unsupported(const std::string& operation, const std::string& haarConfig,
                                     const std::string& instead) {
    throw eckit::UserError("haar engine: " + operation +
                               " is not supported through FDB5 with engine: haar (haarConfig '" + haarConfig + "')" +
                               (instead.empty() ? std::string() : "; " + instead),
                           Here());
}

[[noreturn]] static void unsupported(const std::string& operation, const fdb5::Config& config,
                                     const std::string& instead) {
    unsupported(operation, configOf(config), instead);
}

[[noreturn]] static void failHaar(const std::string& what) {
    throw eckit::SeriousBug(std::string("haar engine: ") + what + ": " + haar_last_error(), Here());
}

// ---------------------------------------------------------------------------------------------
// Keys

/// `k=v,k=v` in the key's own (rule) order, empty values kept (`levelist=`): the name of a
/// database in its URI, parsed back by keyOfText.
static std::string textOf(const fdb5::Key& key) {
    std::string out;
    for (const auto& keyword : key.names()) {
        out += out.empty() ? "" : ",";
        out += keyword + "=" + key.get(keyword);
    }
    return out;
}

static fdb5::Key keyOfText(const std::string& text) {
    fdb5::Key key;
    size_t start = 0;
    while (start < text.size()) {
        size_t end = text.find(',', start);
        if (end == std::string::npos) {
            end = text.size();
        }
        std::string pair = text.substr(start, end - start);
        size_t eq = pair.find('=');
        if (eq == std::string::npos) {
            throw eckit::UserError("haar engine: '" + text + "' is not a database key (k=v,k=v)", Here());
        }
        key.push(pair.substr(0, eq), pair.substr(eq + 1));
        start = end + 1;
    }
    return key;
}

/// The key as FDB5's retrieve compares keys: keywords in order, empty values left out (an
/// absent optional keyword is `levelist=` on one side and missing on the other).
static std::string canon(const fdb5::Key& key) {
    std::string out;
    for (const auto& [keyword, value] : key) {  // map order: sorted by keyword
        if (!value.empty()) {
            out += keyword + "=" + value + ",";
        }
    }
    return out;
}

/// The haar request naming the fields of `key` (empty values left out: haar's request
/// language matches an absent optional keyword by leaving it out). "" = every field.
static std::string requestOf(const fdb5::Key& key) {
    std::string out;
    for (const auto& [keyword, value] : key) {
        if (!value.empty()) {
            out += out.empty() ? "" : ",";
            out += keyword + "=" + value;
        }
    }
    return out;
}

/// The haar request of an FDB5 (MARS) request: `k=v/v,k=v`.
static std::string requestOf(const metkit::mars::MarsRequest& rq) {
    std::string out;
    for (const auto& param : rq.params()) {
        const auto& values = rq.values(param, true);
        if (values.empty()) {
            continue;
        }
        out += out.empty() ? "" : ",";
        out += param + "=";
        for (size_t i = 0; i < values.size(); ++i) {
            out += (i ? "/" : "") + values[i];
        }
    }
    return out;
}

/// A complete key split as FDB5's archive splits it: FDB5's own Schema::expand with a visitor
/// that only records the database, index and datum keys of the first rule that takes it.
struct Split {
    fdb5::Key db;
    fdb5::Key index;
    fdb5::Key datum;
};

struct PrevKeys {
    std::vector<fdb5::Key> prevKeys_;
};

class SplitVisitor : private PrevKeys, public fdb5::WriteVisitor {
public:

    SplitVisitor(const fdb5::Schema& schema, Split& out) : WriteVisitor(prevKeys_), schema_(schema), out_(out) {}

    bool selectDatabase(const fdb5::Key& dbKey, const fdb5::Key&) override {
        out_.db = dbKey;
        return true;
    }
    bool selectIndex(const fdb5::Key& idxKey) override {
        out_.index = idxKey;
        return true;
    }
    bool createIndex(const fdb5::Key& idxKey, size_t) override {
        out_.index = idxKey;
        return true;
    }
    bool selectDatum(const fdb5::Key& datumKey, const fdb5::Key&) override {
        out_.datum = datumKey;
        return true;
    }
    const fdb5::Schema& databaseSchema() const override { return schema_; }

protected:

    void print(std::ostream& out) const override { out << "haar_fdb5::SplitVisitor"; }

private:

    const fdb5::Schema& schema_;
    Split& out_;
};

static bool split(const fdb5::Schema& schema, const fdb5::Key& field, Split& out) {
    SplitVisitor visitor(schema, out);
    schema.expand(field, visitor);
    return visitor.rule() != nullptr;
}

// ---------------------------------------------------------------------------------------------
// Listing haar

struct HaarField {
    fdb5::Key key;         ///< the complete key, absent optional keywords left out
    std::string text;      ///< the same as haar prints it: the field's location is haar:<text>
    std::string database;  ///< haar's name of its database
    uint64_t length = 0;
};

static void listHaar(haar_t* h, const std::string& request, const std::function<void(const HaarField&)>& each) {
    haar_list_t* it = nullptr;
    if (haar_list(h, request.empty() ? nullptr : request.c_str(), &it) != HAAR_OK) {
        failHaar("list '" + request + "'");
    }
    std::unique_ptr<haar_list_t, int (*)(haar_list_t*)> guard(it, haar_list_free);
    HaarField f;
    while (haar_list_next(it) == HAAR_OK) {
        const char* text = nullptr;
        const char* database = nullptr;
        size_t n = 0;
        if (haar_list_key(it, &text) != HAAR_OK || haar_list_key_count(it, &n) != HAAR_OK ||
            haar_list_location(it, &database, nullptr, nullptr, &f.length) != HAAR_OK) {
            failHaar("list '" + request + "'");
        }
        f.text = text;
        f.database = database ? database : "";
        f.key = fdb5::Key();
        for (size_t i = 0; i < n; ++i) {
            const char* keyword = nullptr;
            const char* value = nullptr;
            if (haar_list_key_at(it, i, &keyword, &value) != HAAR_OK) {
                failHaar("list '" + request + "'");
            }
            f.key.push(keyword, value);
        }
        each(f);
    }
}

static eckit::URI databaseURI(const fdb5::Key& dbKey) {
    return eckit::URI(kEngine, eckit::PathName(textOf(dbKey)));
}

// ---------------------------------------------------------------------------------------------
// The engine: where FDB5 finds databases.

class HaarEngine : public fdb5::Engine {
public:

    std::string name() const override { return kEngine; }
    std::string dbType() const override { return kEngine; }
    bool canHandle(const eckit::URI& uri, const fdb5::Config&) const override { return uri.scheme() == kEngine; }
    eckit::URI location(const fdb5::Key& key, const fdb5::Config&) const override { return databaseURI(key); }

    std::vector<eckit::URI> visitableLocations(const fdb5::Key& key, const fdb5::Config& config) const override {
        return databases(requestOf(key), config);
    }
    std::vector<eckit::URI> visitableLocations(const metkit::mars::MarsRequest& rq,
                                               const fdb5::Config& config) const override {
        return databases(requestOf(rq), config);
    }

protected:

    void print(std::ostream& out) const override { out << "HaarEngine[]"; }

private:

    /// The databases holding a field `request` matches, each named by FDB5's database key of
    /// its first field (haar's database is FDB5's: the same schema splits both).
    static std::vector<eckit::URI> databases(const std::string& request, const fdb5::Config& config) {
        haar_t* h = sharedHandle(configOf(config));
        const fdb5::Schema& schema = config.schema();
        std::set<std::string> done;  // haar's database names already placed
        std::map<std::string, eckit::URI> found;
        listHaar(h, request, [&](const HaarField& f) {
            if (done.count(f.database)) {
                return;
            }
            Split s;
            if (split(schema, f.key, s)) {
                done.insert(f.database);
                found.emplace(textOf(s.db), databaseURI(s.db));
            }
        });
        std::vector<eckit::URI> out;
        for (auto& [text, uri] : found) {
            out.push_back(uri);
        }
        return out;
    }
};

static fdb5::EngineBuilder<HaarEngine> engineBuilder;

// ---------------------------------------------------------------------------------------------
// An index: the fields of one index key of one database, as haar listed them.

class HaarIndexLocation : public fdb5::IndexLocation {
public:

    explicit HaarIndexLocation(const eckit::URI& uri) : uri_(uri) {}
    explicit HaarIndexLocation(eckit::Stream& s) {
        std::string text;
        s >> text;
        uri_ = eckit::URI(text);
    }

    eckit::URI uri() const override { return uri_; }
    fdb5::IndexLocation* clone() const override { return new HaarIndexLocation(uri_); }

    static const eckit::ClassSpec& classSpec() { return classSpec_; }

protected:

    const eckit::ReanimatorBase& reanimator() const override { return reanimator_; }
    void encode(eckit::Stream& s) const override { s << uri_.asRawString(); }

    static eckit::ClassSpec classSpec_;
    static eckit::Reanimator<HaarIndexLocation> reanimator_;

private:

    void print(std::ostream& out) const override { out << "HaarIndexLocation[" << uri_ << "]"; }

    eckit::URI uri_;
};

eckit::ClassSpec HaarIndexLocation::classSpec_ = {&fdb5::IndexLocation::classSpec(), "HaarIndexLocation"};
eckit::Reanimator<HaarIndexLocation> HaarIndexLocation::reanimator_;

class HaarIndex : public fdb5::IndexBase {
public:

    HaarIndex(const fdb5::Key& key, const eckit::URI& dbURI, const fdb5::Config& config) :
        IndexBase(key, kEngine), location_(dbURI), config_(configOf(config)) {
        takeTimestamp();
    }

    /// Adds one field of this index (while the catalogue lists its database).
    void insert(const fdb5::Key& datumKey, const fdb5::Field& field) {
        auto [it, fresh] = byDatum_.emplace(canon(datumKey), entries_.size());
        if (!fresh) {  // haar lists each key once; a second is a schema that splits two keys alike
            throw eckit::SeriousBug("haar engine: two fields of index " + textOf(key_) + " have the datum key " +
                                        textOf(datumKey),
                                    Here());
        }
        entries_.push_back({datumKey, field});
        axes_.insert(datumKey);
    }

    /// Ends the listing: the axes are sorted, as FDB5's lookups need.
    void seal() { axes_.sort(); }

    size_t size() const { return entries_.size(); }

    const fdb5::IndexLocation& location() const override { return location_; }

    std::vector<eckit::URI> dataURIs() const override {
        std::vector<eckit::URI> out;
        for (const auto& e : entries_) {
            out.push_back(e.field.location().uri());
        }
        return out;
    }

    bool dirty() const override { return false; }
    void open() override {}
    void reopen() override {}
    void close() override {}
    void flush() override {}
    void visit(fdb5::IndexLocationVisitor& visitor) const override { visitor(location_); }

    bool get(const fdb5::Key& key, const fdb5::Key& /*remapKey*/, fdb5::Field& field) const override {
        auto it = byDatum_.find(canon(key));
        if (it == byDatum_.end()) {
            return false;
        }
        field = entries_[it->second].field;
        return true;
    }

    void entries(fdb5::EntryVisitor& visitor, fdb5::EntryVisitor::IndexScope& scope) const override {
        for (const auto& e : entries_) {
            // The datum rule's values joined by ':' (empty optional values kept): FDB5 rebuilds
            // the datum key from it with the same rule (Rule::makeKey).
            visitor.visitDatum(scope, e.field, e.datum.valuesToString());
        }
    }

    void dump(std::ostream& out, const char* indent, bool simple, bool dumpFields) const override {
        out << indent << "Index haar " << textOf(key_) << ": " << entries_.size() << " fields" << std::endl;
        if (dumpFields) {
            for (const auto& e : entries_) {
                out << indent << "  " << textOf(e.datum) << " " << e.field.location() << std::endl;
            }
        }
    }

    fdb5::IndexStats statistics() const override {
        unsupported("index statistics (fdb-stats)", config_, "use `haar stats`");
    }

    void print(std::ostream& out) const override { out << "HaarIndex[" << textOf(key_) << "]"; }
    void flock() const override {}
    void funlock() const override {}

private:

    void add(const fdb5::Key&, const fdb5::Field&) override {
        unsupported("adding a field to an index", config_, "archive with `haar archive`");
    }

    struct Entry {
        fdb5::Key datum;
        fdb5::Field field;
    };

    HaarIndexLocation location_;
    std::string config_;  // haarConfig, for the refusals
    std::vector<Entry> entries_;
    std::map<std::string, size_t> byDatum_;
};

// ---------------------------------------------------------------------------------------------
// What the reader and the writer share: one database of the haar store, and the refusals.

class HaarCatalogue : public fdb5::CatalogueImpl {
public:

    HaarCatalogue(const fdb5::Key& key, const fdb5::Config& config) :
        CatalogueImpl(key, fdb5::ControlIdentifiers(), config) {}

    std::string type() const override { return kEngine; }

    const fdb5::Schema& schema() const override { return config_.schema(); }
    const fdb5::Rule& rule() const override { return config_.schema().matchingRule(dbKey_); }
    void loadSchema() override {}

    void clean() override {}
    void checkUID() const override {}

    eckit::URI uri() const override { return databaseURI(dbKey_); }
    bool uriBelongs(const eckit::URI& uri) const override { return uri.scheme() == kEngine; }

    // --- what the haar engine refuses (docs/design.md §17, "A haar engine")

    fdb5::StatsReportVisitor* statsReportVisitor() const override {
        unsupported("statistics (fdb-stats)", config_, "use `haar stats`");
    }
    fdb5::PurgeVisitor* purgeVisitor(const fdb5::Store&) const override {
        unsupported("purge (fdb-purge)", config_, "use `haar purge`");
    }
    fdb5::MoveVisitor* moveVisitor(const fdb5::Store&, const metkit::mars::MarsRequest&, const eckit::URI&,
                                   eckit::Queue<fdb5::MoveElement>&) const override {
        unsupported("move (fdb-move)", config_, "");
    }
    void control(const fdb5::ControlAction&, const fdb5::ControlIdentifiers&) const override {
        unsupported("control (fdb-lock/fdb-unlock)", config_, "use haar's own control (Python FDB.control)");
    }
    void maskIndexEntries(const std::set<fdb5::Index>&) const override {
        unsupported("masking index entries (purge)", config_, "use `haar purge`");
    }
    /// Nothing is masked in FDB5's sense: haar masks a re-archived key itself and lists the
    /// newest copy only.
    void allMasked(std::set<std::pair<eckit::URI, eckit::Offset>>&, std::set<eckit::URI>&) const override {}
    fdb5::CatalogueWipeState wipeInit() const override { unsupported("wipe (fdb-wipe)", config_, "use `haar wipe`"); }
    bool markIndexForWipe(const fdb5::Index&, bool, fdb5::CatalogueWipeState&) const override {
        unsupported("wipe (fdb-wipe)", config_, "use `haar wipe`");
    }
    void finaliseWipeState(fdb5::CatalogueWipeState&) const override {
        unsupported("wipe (fdb-wipe)", config_, "use `haar wipe`");
    }
    bool doWipeUnknowns(const std::set<eckit::URI>&) const override {
        unsupported("wipe (fdb-wipe)", config_, "use `haar wipe`");
    }
    bool doWipeURIs(const fdb5::CatalogueWipeState&) const override {
        unsupported("wipe (fdb-wipe)", config_, "use `haar wipe`");
    }
    void doWipeEmptyDatabase() const override { unsupported("wipe (fdb-wipe)", config_, "use `haar wipe`"); }
    bool doUnsafeFullWipe() const override { unsupported("wipe (fdb-wipe)", config_, "use `haar wipe`"); }

protected:

    haar_t* handle() const { return sharedHandle(configOf(config_)); }
};

// ---------------------------------------------------------------------------------------------
// The catalogue reader: one database, listed from haar when opened.

class HaarCatalogueReader : public HaarCatalogue, public fdb5::CatalogueReader {
public:

    HaarCatalogueReader(const fdb5::Key& key, const fdb5::Config& config) : HaarCatalogue(key, config) {}
    HaarCatalogueReader(const eckit::URI& uri, const fdb5::Config& config) :
        HaarCatalogue(keyOfText(uri.name()), config), fromURI_(true) {}

    ~HaarCatalogueReader() override = default;

    /// Lists the database. False (no such database) when haar has no field of it, unless FDB5
    /// found the database itself through the engine (then it is listed as empty).
    bool open() override {
        load();
        return fromURI_ || !indexes_.empty();
    }
    void flush(size_t) override {}
    void close() override {}
    bool exists() const override {
        const_cast<HaarCatalogueReader*>(this)->load();
        return !indexes_.empty();
    }

    std::vector<fdb5::Index> indexes(bool /*sorted: always in key order*/) const override {
        const_cast<HaarCatalogueReader*>(this)->load();
        std::vector<fdb5::Index> out;
        for (const auto& [text, index] : indexes_) {
            out.push_back(index);
        }
        return out;
    }

    bool selectIndex(const fdb5::Key& idxKey) override {
        load();
        auto it = indexes_.find(canon(idxKey));
        current_ = it == indexes_.end() ? nullptr : &it->second;
        return current_ != nullptr;
    }
    void deselectIndex() override { current_ = nullptr; }

    const fdb5::Key& indexKey() const override {
        if (!current_) {
            throw eckit::SeriousBug("haar engine: indexKey() with no index selected", Here());
        }
        return current_->key();
    }

    bool retrieve(const fdb5::Key& datumKey, fdb5::Field& field) const override {
        return current_ && current_->get(datumKey, fdb5::Key(), field);
    }

    void dump(std::ostream& out, bool simple, const eckit::Configuration&) const override {
        const_cast<HaarCatalogueReader*>(this)->load();
        out << "haar database " << textOf(dbKey_) << " (haarConfig '" << configOf(config_) << "')" << std::endl;
        for (const auto& [text, index] : indexes_) {
            index.dump(out, "  ", simple, !simple);
        }
    }

    void print(std::ostream& out) const override { out << "HaarCatalogueReader[" << textOf(dbKey_) << "]"; }

    fdb5::DbStats stats() const override { unsupported("database statistics (fdb-stats)", config_, "use `haar stats`"); }

private:

    std::optional<fdb5::Axis> computeAxis(const std::string& keyword) const override {
        const_cast<HaarCatalogueReader*>(this)->load();
        fdb5::Axis axis;
        bool found = false;
        if (auto [it, has] = dbKey_.find(keyword); has) {
            axis.insert(it->second);
            found = true;
        }
        for (const auto& [text, index] : indexes_) {
            if (auto [it, has] = index.key().find(keyword); has) {
                axis.insert(it->second);
                found = true;
            }
            if (index.axes().has(keyword)) {
                for (const auto& value : index.axes().values(keyword)) {
                    axis.insert(value);
                }
                found = true;
            }
        }
        if (!found) {
            return std::nullopt;
        }
        axis.sort();
        return axis;
    }

    /// Lists the database in haar once: every field whose key FDB5's schema places in it,
    /// grouped by index key.
    void load() {
        if (loaded_) {
            return;
        }
        const fdb5::Schema& schema = config_.schema();
        const std::string dbCanon = canon(dbKey_);
        const eckit::URI dbURI = databaseURI(dbKey_);
        const time_t now = ::time(nullptr);
        std::map<std::string, HaarIndex*> byIndex;
        size_t unplaced = 0;
        listHaar(handle(), requestOf(dbKey_), [&](const HaarField& f) {
            Split s;
            if (!split(schema, f.key, s)) {
                ++unplaced;
                return;
            }
            if (canon(s.db) != dbCanon) {
                return;  // the request's values, another rule's database
            }
            std::string idx = canon(s.index);
            HaarIndex*& index = byIndex[idx];
            if (!index) {
                index = new HaarIndex(s.index, dbURI, config_);
                indexes_.emplace(idx, fdb5::Index(index));  // owns it
            }
            std::shared_ptr<const fdb5::FieldLocation> location(fdb5::FieldLocationFactory::instance().build(
                kEngine, eckit::URI(kEngine, eckit::PathName(f.text)), eckit::Offset(0), eckit::Length(f.length),
                fdb5::Key()));
            index->insert(s.datum, fdb5::Field(location, now));
        });
        for (auto& [idx, index] : byIndex) {
            index->seal();
        }
        if (unplaced) {
            eckit::Log::warning() << "haar engine: " << unplaced << " field(s) of database " << textOf(dbKey_)
                                  << " match no rule of FDB5's schema and are not shown" << std::endl;
        }
        loaded_ = true;
    }

    bool fromURI_ = false;
    bool loaded_ = false;
    std::map<std::string, fdb5::Index> indexes_;  // by canon(index key)
    const fdb5::Index* current_ = nullptr;
};

static fdb5::CatalogueReaderBuilder<HaarCatalogueReader> readerBuilder(kEngine);

// ---------------------------------------------------------------------------------------------
// The catalogue writer: FDB5's archive goes to haar once, under the key FDB5 computed.
//
// FDB5 (ArchiveVisitor::selectDatum) hands the bytes to the store and the location the store
// gives to this catalogue's archive with the datum key. With engine: haar the store keeps the
// bytes aside for the duration of that call (HaarStore::archiveCb, pendingField()), and the
// archive here names them by the complete key (database + index + datum, FDB5's keys) in
// haar_archive_str: haar does not key the message again with ecCodes.

class HaarCatalogueWriter : public HaarCatalogue, public fdb5::CatalogueWriter {
public:

    HaarCatalogueWriter(const fdb5::Key& key, const fdb5::Config& config) : HaarCatalogue(key, config) {}
    HaarCatalogueWriter(const eckit::URI& uri, const fdb5::Config& config) : HaarCatalogue(fdb5::Key(), config) {
        unsupported("writing a catalogue named by URI (" + uri.asRawString() + ")", config, "");
    }

    ~HaarCatalogueWriter() override {
        try {
            flushHaar();
        }
        catch (std::exception& e) {
            eckit::Log::error() << "haar engine: flush of " << textOf(dbKey_) << " at close failed: " << e.what()
                                << std::endl;
        }
    }

    bool open() override { return true; }
    bool exists() const override { return true; }
    void flush(size_t) override { flushHaar(); }
    void close() override { flushHaar(); }

    /// haar makes an index when its first field is archived: every index key is accepted.
    bool selectIndex(const fdb5::Key& idxKey) override {
        current_ = idxKey;
        auto it = indexes_.find(canon(idxKey));
        if (it == indexes_.end()) {
            indexes_.emplace(canon(idxKey), fdb5::Index(new HaarIndex(idxKey, uri(), config_)));
        }
        return true;
    }
    bool createIndex(const fdb5::Key& idxKey, size_t) override { return selectIndex(idxKey); }
    void deselectIndex() override { current_ = fdb5::Key(); }

    const fdb5::Index& currentIndex() override {
        auto it = indexes_.find(canon(current_));
        if (it == indexes_.end()) {
            throw eckit::SeriousBug("haar engine: currentIndex() with no index selected", Here());
        }
        return it->second;
    }
    const fdb5::Key& indexKey() const override { return current_; }

    void archive(const fdb5::Key& idxKey, const fdb5::Key& datumKey,
                 std::shared_ptr<const fdb5::FieldLocation> location) override {
        PendingField& pending = pendingField();
        if (!pending.data) {
            // The store archived the field itself (keyed by haar): it is in haar already.
            if (location && location->uri().scheme() == kEngine && location->uri().name() != kPendingName) {
                ++archived_;
                return;
            }
            throw eckit::SeriousBug("haar engine: archive of " + textOf(datumKey) +
                                        " without the field's bytes: the store is not haar's (store: haar needed)",
                                    Here());
        }
        std::string key = requestOf(dbKey_);
        for (const fdb5::Key* part : {&idxKey, &datumKey}) {
            for (const auto& keyword : part->names()) {
                const std::string& value = part->get(keyword);
                if (!value.empty()) {
                    key += "," + keyword + "=" + value;
                }
            }
        }
        const void* data = pending.data;
        size_t length = pending.length;
        pending = PendingField();  // taken, whatever happens next
        if (haar_archive_str(handle(), key.c_str(), data, length) != HAAR_OK) {
            failHaar("archive " + key);
        }
        ++archived_;
    }

    std::vector<fdb5::Index> indexes(bool) const override {
        unsupported("listing the indexes of a database being archived", config_, "list with a reader");
    }
    void dump(std::ostream& out, bool, const eckit::Configuration&) const override {
        out << "haar database " << textOf(dbKey_) << " (being archived, haarConfig '" << configOf(config_) << "')"
            << std::endl;
    }
    void print(std::ostream& out) const override { out << "HaarCatalogueWriter[" << textOf(dbKey_) << "]"; }

    void overlayDB(const fdb5::Catalogue&, const std::set<std::string>&, bool) override {
        unsupported("overlay (fdb-overlay)", config_, "");
    }
    void index(const fdb5::Key&, const eckit::URI&, eckit::Offset, eckit::Length) override {
        unsupported("indexing existing data (fdb-adopt, fdb-reindex)", config_, "archive with `haar archive`");
    }
    void reconsolidate() override { unsupported("reconsolidate (fdb-reconsolidate-toc)", config_, ""); }

private:

    void flushHaar() {
        if (archived_ == 0) {
            return;
        }
        if (haar_flush(handle()) != HAAR_OK) {
            failHaar("flush of " + textOf(dbKey_));
        }
        archived_ = 0;
    }

    fdb5::Key current_;
    std::map<std::string, fdb5::Index> indexes_;  // by canon(index key); empty: haar holds the fields
    size_t archived_ = 0;
};

static fdb5::CatalogueWriterBuilder<HaarCatalogueWriter> writerBuilder(kEngine);

}  // namespace haar_fdb5
