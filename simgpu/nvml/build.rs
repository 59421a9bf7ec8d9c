// The library is found by the dynamic loader under NVML's name, so it carries NVML's SONAME.
// It binds its own references to its own definitions (-Bsymbolic): a preloaded library that
// interposes an NVML entry point sees the application's calls, never NVML's internal ones.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnvidia-ml.so.1");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic");
}
