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

}  // namespace haar_fdb5
