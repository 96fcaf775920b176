fn main() {
    // The real driver's soname: the fake runtime dlopen()s "libcuda.so.1".
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
    // Bind the library's references to its own functions at link time, as NVIDIA's
    // libraries do: the function pointers it hands out (cuGetProcAddress answers, the
    // runtime's internal calls) are its own, never an LD_PRELOAD interposer's export.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic");
    // Not linked -z nodelete: the fake keeps itself mapped once it hands out a private
    // table (api/export.rs, keep_mapped), so a program reloading the bare driver sees it unloaded.
}
