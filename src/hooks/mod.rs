//! The C ABI face: symbol table, wrappers, and the three resolution paths.
