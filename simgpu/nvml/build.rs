// The library is found by the dynamic loader under NVML's name, so it carries NVML's SONAME.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnvidia-ml.so.1");
}
