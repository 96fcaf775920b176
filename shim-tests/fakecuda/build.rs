fn main() {
    // The real driver's soname: the fake runtime dlopen()s "libcuda.so.1".
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
}
