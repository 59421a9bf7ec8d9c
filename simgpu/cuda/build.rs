// The library is found by the dynamic loader under its driver name, so it carries the
// driver's SONAME. It binds its own references to its own definitions (-Bsymbolic), as a
// real driver's internal calls never pass through its exports: a preloaded library that
// interposes an entry point sees the application's calls to it, never simgpu's.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic");
}
