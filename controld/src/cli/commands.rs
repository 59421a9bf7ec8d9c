//! One function per command: read the flags into the library's types, call the library or
//! the daemon, print the answer.

use super::connect::Target;
use super::declaration::{Limits, Place};
use super::error::CliError;
use super::output::{json, print};
use super::render::render_status;
use std::ffi::OsString;
use std::path::Path;
use tessera_controld::api::{Answer, Request};
use tessera_controld::spec::ContainerName;
use tessera_controld::state::SpecChange;

/// `controld run`: the daemon, until SIGTERM.
pub fn run_daemon(place: &Place) -> Result<i32, CliError> {
    tessera_controld::daemon::run(&tessera_controld::daemon::Options {
        config: place.config.clone(),
        state_dir: place.state_dir.clone(),
    })?;
    Ok(0)
}

/// `controld container add NAME`.
pub fn container_add(target: &Target<'_>, name: &str, limits: &Limits) -> Result<i32, CliError> {
    let spec = limits.spec(ContainerName::new(name)?)?;
    let answer = target.call(&Request::Add {
        container: spec,
        transient: false,
    })?;
    print_container(answer)
}

/// `controld container set NAME`.
pub fn container_set(target: &Target<'_>, name: String, limits: &Limits) -> Result<i32, CliError> {
    let change = limits.change()?;
    if change == SpecChange::default() {
        return Err(CliError::NothingToChange);
    }
    print_container(target.call(&Request::Set { name, change })?)
}

/// `controld container rm NAME`.
pub fn container_rm(target: &Target<'_>, name: String, force: bool) -> Result<i32, CliError> {
    let removed = format!("removed {name}\n");
    target.call(&Request::Rm { name, force })?;
    print(&removed)
}

/// `controld container list`.
pub fn container_list(target: &Target<'_>, as_json: bool) -> Result<i32, CliError> {
    let list = target.containers()?;
    if as_json {
        return print(&json(&list));
    }
    let mut out = format!(
        "{:<24} {:<8} {:<12} {:<12} {:<9} {:<10} {}\n",
        "NAME", "GPUS", "MEMORY", "COMPUTE", "PRIORITY", "TIMESLICE", "ORIGIN"
    );
    for c in &list {
        out += &format!(
            "{:<24} {:<8} {:<12} {:<12} {:<9} {:<10} {}\n",
            c.spec.name,
            c.spec.gpus.to_string(),
            c.spec
                .memory
                .map_or("unlimited".to_string(), |m| m.to_string()),
            c.spec.compute.to_string(),
            c.spec.priority.to_string(),
            c.timeslice.to_string(),
            serde_json::to_value(c.origin)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        );
    }
    print(&out)
}

/// `controld status`.
pub fn status(target: &Target<'_>, as_json: bool) -> Result<i32, CliError> {
    let Answer::Status(status) = target.call(&Request::Status {})? else {
        return Err(CliError::Unexpected);
    };
    print(&if as_json {
        json(&status)
    } else {
        render_status(&status)
    })
}

/// `controld exec -- CMD [ARGS...]`: the command's own exit status.
pub fn exec(
    target: &Target<'_>,
    name: Option<&str>,
    limits: &Limits,
    command: &[OsString],
) -> Result<i32, CliError> {
    let name = match name {
        Some(name) => ContainerName::new(name)?,
        None => ContainerName::new(&format!("exec-{}", std::process::id()))?,
    };
    let spec = limits.spec(name)?;
    Ok(tessera_controld::exec::exec(
        &target.socket()?,
        spec,
        command,
    )?)
}

/// `controld cdi`: the CDI spec of the containers the daemon has.
pub fn cdi(target: &Target<'_>, output: Option<&Path>) -> Result<i32, CliError> {
    let list = target.containers()?;
    let library = tessera_controld::exec::preload_library()?;
    let spec = json(&tessera_controld::cdi::spec(&list, &library));
    match output {
        Some(path) => {
            std::fs::write(path, spec).map_err(|source| CliError::Write {
                what: "the CDI spec",
                path: path.to_path_buf(),
                source,
            })?;
            Ok(0)
        }
        None => print(&spec),
    }
}

/// `controld completions SHELL`: the completion script of `command`, this command line.
pub fn completions(
    shell: clap_complete::Shell,
    command: &mut clap::Command,
) -> Result<i32, CliError> {
    let mut script = Vec::new();
    // Into memory first: the generator cannot take a closed pipe as `print` does.
    clap_complete::generate(shell, command, "controld", &mut script);
    print(&String::from_utf8_lossy(&script))
}

/// The container the daemon answers `add` and `set` with, on one line.
fn print_container(answer: Answer) -> Result<i32, CliError> {
    let Answer::Container(c) = answer else {
        return Err(CliError::Unexpected);
    };
    print(&format!(
        "{}: gpus {}, memory {}, compute {}, priority {}, time slice {}; region {}\n",
        c.spec.name,
        c.spec.gpus,
        c.spec
            .memory
            .map_or("unlimited".to_string(), |m| m.to_string()),
        c.spec.compute,
        c.spec.priority,
        c.timeslice,
        c.region.display()
    ))
}
