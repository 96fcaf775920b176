fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcudart.so.12");
}
