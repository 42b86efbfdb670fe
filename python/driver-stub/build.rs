//! The stub answers to the driver's name: the dynamic loader matches the extension's `NEEDED
//! libcuda.so.1` against the soname of a library already loaded.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
}
