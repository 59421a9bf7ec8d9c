//! `cuInit` and `cuDriverGetVersion`.

use crate::ffi::write_out;
use crate::model::driver::{self, DRIVER_VERSION};
use crate::model::rm;

cuda_entry! {
    fn cuInit(flags: u32) {
        let devices = driver::attach(flags)?;
        // Once the process is attached: the RM's requests go through the process's
        // `ioctl`, which may be an interposer's that calls back into this driver.
        rm::open(devices);
        Ok(())
    }

    fn cuDriverGetVersion(version: *mut i32) {
        // SAFETY: the driver API's contract: version is null or points to an int.
        unsafe { write_out(version, DRIVER_VERSION) }
    }
}
