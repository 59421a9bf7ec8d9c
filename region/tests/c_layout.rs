//! `include/tessera.h` describes the same bytes as `tessera_region::layout`: a C program
//! compiled against the header prints every size, offset and constant, and they must match.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use tessera_region::env;
use tessera_region::layout::{self, describe};

fn header_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../include")
}

/// The C program: one `name offset size` line per struct and field, then the constants.
fn program() -> String {
    let mut c = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include <string.h>\n#include \"tessera.h\"\n\
         #define F(s, f) printf(#s \".\" #f \" %zu %zu\\n\", offsetof(struct s, f), sizeof(((struct s *)0)->f))\n\
         #define S(s) printf(#s \" 0 %zu\\n\", sizeof(struct s))\n\
         int main(void) {\n",
    );
    for field in describe() {
        match field.name.split_once('.') {
            Some((s, f)) => c += &format!("    F({s}, {f});\n"),
            None => c += &format!("    S({});\n", field.name),
        }
    }
    c += r#"
    printf("MAGIC %zu", (size_t)TESSERA_MAGIC_LEN);
    for (size_t i = 0; i < TESSERA_MAGIC_LEN; i++) printf(" %u", (unsigned)(unsigned char)TESSERA_MAGIC[i]);
    printf("\n");
    printf("ABI_VERSION %u\n", (unsigned)TESSERA_ABI_VERSION);
    printf("MAX_DEVICES %u\n", (unsigned)TESSERA_MAX_DEVICES);
    printf("MAX_PROCESSES %u\n", (unsigned)TESSERA_MAX_PROCESSES);
    printf("NAME_LEN %u\n", (unsigned)TESSERA_NAME_LEN);
    printf("UNLIMITED %llu\n", (unsigned long long)TESSERA_UNLIMITED);
    printf("LOCK_BASE %lld\n", (long long)TESSERA_LOCK_BASE);
    printf("MEASURE_LOCK %lld\n", (long long)TESSERA_MEASURE_LOCK);
    printf("SLOT_FREE %u\n", (unsigned)TESSERA_SLOT_FREE);
    printf("SLOT_LIVE %u\n", (unsigned)TESSERA_SLOT_LIVE);
    printf("REGION_SIZE %zu\n", (size_t)TESSERA_REGION_SIZE);
    printf("COMPUTE %u %u %u %u %u %u %llu %u %u %u\n", (unsigned)TESSERA_COMPUTE_UNLIMITED,
           (unsigned)TESSERA_COMPUTE_DAEMON, (unsigned)TESSERA_COMPUTE_LOCAL,
           (unsigned)TESSERA_PRIORITY_ONLINE, (unsigned)TESSERA_PRIORITY_OFFLINE,
           (unsigned)TESSERA_DEFAULT_WINDOW,
           (unsigned long long)TESSERA_DEFAULT_WINDOW_NS, (unsigned)TESSERA_PPM_ALL,
           (unsigned)TESSERA_SPAN_SLOTS, (unsigned)TESSERA_SPAN_LEN_BITS);
    printf("TIMESLICE %u %u %u %u %u\n", (unsigned)TESSERA_TIMESLICE_NONE,
           (unsigned)TESSERA_TIMESLICE_SET, (unsigned)TESSERA_TIMESLICE_NO_GROUPS,
           (unsigned)TESSERA_TIMESLICE_REFUSED, (unsigned)TESSERA_TIMESLICE_ERRNO);
"#;
    // One line per variable of the environment contract, by the header's macro for it.
    for name in env::HEADER {
        c += &format!("    printf(\"ENV %s\\n\", {});\n", env_macro(name));
    }
    c += "    return 0;\n}\n";
    c
}

/// The header's macro for an environment variable: `TESSERA_ENV_` and the name without its
/// `TESSERA_`.
fn env_macro(name: &str) -> String {
    format!("TESSERA_ENV_{}", name.strip_prefix("TESSERA_").unwrap())
}

fn compile_and_run(compiler: &str, lang: &str) -> String {
    let dir = std::env::temp_dir().join(format!("tessera-c-layout-{}-{lang}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&src, program()).unwrap();
    let std_flag = if lang == "c" {
        "-std=c11"
    } else {
        "-std=c++17"
    };
    let out = Command::new(compiler)
        .args([
            "-x",
            lang,
            std_flag,
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-I",
        ])
        .arg(header_dir())
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {compiler} (a C compiler is needed): {e}"));
    assert!(
        out.status.success(),
        "{compiler} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success());
    let _ = std::fs::remove_dir_all(&dir);
    String::from_utf8(run.stdout).unwrap()
}

fn check(output: &str) {
    let mut lines: BTreeMap<&str, &str> = BTreeMap::new();
    for line in output.lines() {
        let (key, rest) = line.split_once(' ').unwrap();
        lines.insert(key, rest);
    }
    for field in describe() {
        let c = lines
            .get(field.name)
            .unwrap_or_else(|| panic!("C printed nothing for {}", field.name));
        assert_eq!(
            *c,
            format!("{} {}", field.offset, field.size),
            "{}: C says `offset size` = {c}, Rust says {} {}",
            field.name,
            field.offset,
            field.size
        );
    }
    let magic: Vec<String> = layout::MAGIC.iter().map(u8::to_string).collect();
    let want = [
        (
            "MAGIC",
            format!("{} {}", layout::MAGIC.len(), magic.join(" ")),
        ),
        ("ABI_VERSION", layout::ABI_VERSION.to_string()),
        ("MAX_DEVICES", layout::MAX_DEVICES.to_string()),
        ("MAX_PROCESSES", layout::MAX_PROCESSES.to_string()),
        ("NAME_LEN", layout::NAME_LEN.to_string()),
        ("UNLIMITED", layout::UNLIMITED.to_string()),
        ("LOCK_BASE", layout::LOCK_BASE.to_string()),
        ("MEASURE_LOCK", layout::MEASURE_LOCK.to_string()),
        ("SLOT_FREE", layout::SLOT_FREE.to_string()),
        ("SLOT_LIVE", layout::SLOT_LIVE.to_string()),
        ("REGION_SIZE", layout::TOTAL_SIZE.to_string()),
        (
            "COMPUTE",
            format!(
                "{} {} {} {} {} {} {} {} {} {}",
                layout::COMPUTE_UNLIMITED,
                layout::COMPUTE_DAEMON,
                layout::COMPUTE_LOCAL,
                layout::PRIORITY_ONLINE,
                layout::PRIORITY_OFFLINE,
                layout::DEFAULT_WINDOW,
                layout::DEFAULT_WINDOW_NS,
                layout::PPM_ALL,
                layout::SPAN_SLOTS,
                layout::SPAN_LEN_BITS
            ),
        ),
        (
            "TIMESLICE",
            format!(
                "{} {} {} {} {}",
                layout::TIMESLICE_NONE,
                layout::TIMESLICE_SET,
                layout::TIMESLICE_NO_GROUPS,
                layout::TIMESLICE_REFUSED,
                layout::TIMESLICE_ERRNO
            ),
        ),
    ];
    for (key, value) in want {
        assert_eq!(lines.get(key).copied(), Some(value.as_str()), "{key}");
    }
    // The header spells every variable as the env module does.
    let printed: Vec<&str> = output
        .lines()
        .filter_map(|l| l.strip_prefix("ENV "))
        .collect();
    assert_eq!(printed, env::HEADER);
}

#[test]
fn the_c_header_declares_no_variable_the_env_module_lacks() {
    let header = std::fs::read_to_string(header_dir().join("tessera.h")).unwrap();
    let declared: Vec<&str> = header
        .lines()
        .filter_map(|l| l.strip_prefix("#define TESSERA_ENV_"))
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    let want: Vec<String> = env::HEADER
        .iter()
        .map(|name| env_macro(name)["TESSERA_ENV_".len()..].to_string())
        .collect();
    assert_eq!(declared, want);
}

#[test]
fn the_c_header_matches_the_rust_layout() {
    check(&compile_and_run("gcc", "c"));
}

#[test]
fn the_c_header_is_valid_cxx_too() {
    if Command::new("g++").arg("--version").output().is_err() {
        eprintln!("no g++: C++ check skipped");
        return;
    }
    check(&compile_and_run("g++", "c++"));
}

#[test]
fn every_field_is_described() {
    // The described fields of each struct tile it exactly: no field was forgotten.
    let fields = describe();
    for whole in fields.iter().filter(|f| !f.name.contains('.')) {
        let mut parts: Vec<_> = fields
            .iter()
            .filter(|f| f.name.split_once('.').map(|(s, _)| s) == Some(whole.name))
            .map(|f| (f.offset, f.size))
            .collect();
        parts.sort();
        let mut at = 0;
        for (offset, size) in parts {
            assert_eq!(offset, at, "{}: gap or overlap at {at}", whole.name);
            at = offset + size;
        }
        assert_eq!(
            at, whole.size,
            "{}: fields do not reach its end",
            whole.name
        );
    }
}
