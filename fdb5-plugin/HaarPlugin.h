// What the two halves of libhaar-fdb5.so share: HaarStore.cc (FDB5's Store, the field
// locations and the `haar:` URIs) and HaarCatalogue.cc (the haar engine: FDB5's Catalogue
// over haar's catalogue). See docs/design.md §17.
#pragma once

#include <string>

extern "C" {
#include "haar.h"
}

namespace haar_fdb5 {

/// The process's one libhaar handle of the haar configuration `configPath` ("" = libhaar's
/// choice from $HAAR_CONFIG), opened on first use and shared by stores and catalogues.
haar_t* sharedHandle(const std::string& configPath);

/// With `engine: haar`, the bytes of the field being archived, from HaarStore::archiveCb to
/// the catalogue writer's archive, which FDB5 calls from within it on the same thread (the
/// catalogue names the field by FDB5's complete key; the store alone cannot). Empty (data
/// null) outside that call; the catalogue empties it when it takes the bytes.
struct PendingField {
    const void* data = nullptr;
    size_t length = 0;
};
PendingField& pendingField();  // this thread's

/// The name of the location the store hands the catalogue for a pending field: `haar:pending`.
static const char* const kPendingName = "pending";

}  // namespace haar_fdb5
