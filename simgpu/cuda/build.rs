// The library is found by the dynamic loader under its driver name, so it carries the
// driver's SONAME.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
}
