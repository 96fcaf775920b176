fn main() {
    println!("culedger {}", env!("CARGO_PKG_VERSION"));
}
