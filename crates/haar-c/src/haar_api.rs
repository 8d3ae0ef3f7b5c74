//! haar's own C ABI (`include/haar.h`).
