fn main() {
    // The real driver's soname: the fake runtime dlopen()s "libcuda.so.1".
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
    // Bind the library's references to its own functions at link time, as NVIDIA's
    // libraries do: the function pointers it hands out (cuGetProcAddress answers, the
    // runtime's internal calls) are its own, never an LD_PRELOAD interposer's export.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic");
    // Never unmapped by dlclose: a runtime that gives up during initialisation (13.5's, on a
    // private table the fake lacks) closes the driver but still reads the tables it got from
    // cuGetExportTable in its exit handlers.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
}
