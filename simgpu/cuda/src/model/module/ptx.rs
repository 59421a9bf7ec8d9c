//! Reads what a driver needs from PTX text without compiling it: the kernels (`.entry`) with
//! the size and offset of each parameter, and the module-scope variables (`.global`,
//! `.const`) with their sizes and initial values. Function bodies are skipped.

use std::fmt;

/// A parsed module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ptx {
    /// `.version` major and minor.
    pub version: (u32, u32),
    /// The first `.target` (like `sm_80`).
    pub target: String,
    /// The kernels defined in the module, in order.
    pub entries: Vec<Entry>,
    /// Module-scope variables defined in the module.
    pub globals: Vec<Variable>,
}

/// A kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Its name.
    pub name: String,
    /// Its parameters, in order.
    pub params: Vec<Param>,
    /// `.maxntid` or `.reqntid` threads per block, if given.
    pub max_threads: Option<u32>,
    /// `.maxnreg`, if given.
    pub max_registers: Option<u32>,
    /// Bytes of statically declared `.shared` memory in the body.
    pub shared_bytes: u64,
}

/// A kernel parameter's place in the parameter buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Param {
    /// Byte offset.
    pub offset: usize,
    /// Byte size.
    pub size: usize,
}

impl Entry {
    /// The size of the whole parameter buffer.
    pub(crate) fn params_size(&self) -> usize {
        self.params.last().map_or(0, |p| p.offset + p.size)
    }
}

/// A module-scope variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Variable {
    /// Its name.
    pub name: String,
    /// `.global` or `.const`.
    pub space: &'static str,
    /// Byte size.
    pub size: u64,
    /// Byte alignment.
    pub align: u64,
    /// Initial bytes (the rest is zero).
    pub init: Vec<u8>,
}

/// Why the text is not PTX simgpu can use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PtxError(String);

impl fmt::Display for PtxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid PTX: {}", self.0)
    }
}

fn err<T>(msg: impl Into<String>) -> Result<T, PtxError> {
    Err(PtxError(msg.into()))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok<'a> {
    /// `.name`
    Dir(&'a str),
    Ident(&'a str),
    Num(&'a str),
    Str,
    Punct(char),
}

fn tokenize(text: &str) -> Result<Vec<Tok<'_>>, PtxError> {
    let bytes = text.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0;
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'$';
    while i < bytes.len() {
        let b = bytes[i];
        let start = i;
        if b.is_ascii_whitespace() {
            i += 1;
        } else if bytes[i..].starts_with(b"//") {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
        } else if bytes[i..].starts_with(b"/*") {
            let end = text[i + 2..]
                .find("*/")
                .ok_or(PtxError("unterminated comment".into()))?;
            i += 2 + end + 2;
        } else if b == b'"' {
            i += 1;
            while i < bytes.len() && bytes[i] != b'"' {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            if i >= bytes.len() {
                return err("unterminated string");
            }
            i += 1;
            toks.push(Tok::Str);
        } else if b == b'.'
            && bytes
                .get(i + 1)
                .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_')
        {
            i += 1;
            while i < bytes.len() && word(bytes[i]) {
                i += 1;
            }
            toks.push(Tok::Dir(&text[start..i]));
        } else if b.is_ascii_digit() {
            while i < bytes.len() && (word(bytes[i]) || bytes[i] == b'.') {
                i += 1;
            }
            toks.push(Tok::Num(&text[start..i]));
        } else if b.is_ascii_alphabetic() || b == b'_' || b == b'$' || b == b'%' {
            i += 1;
            while i < bytes.len() && word(bytes[i]) {
                i += 1;
            }
            toks.push(Tok::Ident(&text[start..i]));
        } else {
            let c = text[i..].chars().next().unwrap_or('?');
            i += c.len_utf8();
            toks.push(Tok::Punct(c));
        }
    }
    Ok(toks)
}

/// Byte size of a PTX fundamental type.
fn type_size(dir: &str) -> Option<usize> {
    Some(match dir {
        ".u8" | ".s8" | ".b8" | ".pred" => 1,
        ".u16" | ".s16" | ".b16" | ".f16" | ".bf16" => 2,
        ".u32" | ".s32" | ".b32" | ".f32" | ".f16x2" | ".bf16x2" => 4,
        ".u64" | ".s64" | ".b64" | ".f64" => 8,
        ".b128" => 16,
        _ => return None,
    })
}

fn parse_uint(s: &str) -> Option<u64> {
    let s = s.trim_end_matches(['U', 'u']);
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16).ok()
    } else {
        s.parse().ok()
    }
}

struct Parser<'a> {
    toks: Vec<Tok<'a>>,
    pos: usize,
}

/// Directives that start a module-scope statement; an unknown statement is skipped up to
/// the next of these.
const STARTERS: &[&str] = &[
    ".version",
    ".target",
    ".address_size",
    ".visible",
    ".extern",
    ".weak",
    ".common",
    ".entry",
    ".func",
    ".global",
    ".const",
    ".file",
    ".section",
];

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<Tok<'a>> {
        self.toks.get(self.pos).copied()
    }

    fn next(&mut self) -> Option<Tok<'a>> {
        let t = self.peek();
        self.pos += 1;
        t
    }

    fn eat(&mut self, t: Tok<'_>) -> bool {
        if self.peek() == Some(t) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, t: Tok<'_>, what: &str) -> Result<(), PtxError> {
        if self.eat(t) {
            Ok(())
        } else {
            err(format!("expected {what}, found {:?}", self.peek()))
        }
    }

    fn number(&mut self, what: &str) -> Result<u64, PtxError> {
        match self.next() {
            Some(Tok::Num(n)) => {
                parse_uint(n).ok_or(PtxError(format!("bad number `{n}` in {what}")))
            }
            t => err(format!("expected a number in {what}, found {t:?}")),
        }
    }

    fn ident(&mut self, what: &str) -> Result<&'a str, PtxError> {
        match self.next() {
            Some(Tok::Ident(n)) => Ok(n),
            t => err(format!("expected the name of {what}, found {t:?}")),
        }
    }

    /// Skips a balanced `{ ... }` starting at the current `{`; returns the token range inside.
    fn skip_block(&mut self) -> Result<(usize, usize), PtxError> {
        self.expect(Tok::Punct('{'), "`{`")?;
        let start = self.pos;
        let mut depth = 1;
        while depth > 0 {
            match self.next() {
                Some(Tok::Punct('{')) => depth += 1,
                Some(Tok::Punct('}')) => depth -= 1,
                Some(_) => {}
                None => return err("unbalanced `{`"),
            }
        }
        Ok((start, self.pos - 1))
    }

    /// Skips a balanced `( ... )` if one starts here.
    fn skip_parens(&mut self) -> Result<(), PtxError> {
        if !self.eat(Tok::Punct('(')) {
            return Ok(());
        }
        let mut depth = 1;
        while depth > 0 {
            match self.next() {
                Some(Tok::Punct('(')) => depth += 1,
                Some(Tok::Punct(')')) => depth -= 1,
                Some(_) => {}
                None => return err("unbalanced `(`"),
            }
        }
        Ok(())
    }

    /// Skips an unknown statement: up to `;`, over a block, or up to the next statement.
    fn skip_statement(&mut self) -> Result<(), PtxError> {
        loop {
            match self.peek() {
                None => return Ok(()),
                Some(Tok::Punct(';')) => {
                    self.pos += 1;
                    return Ok(());
                }
                Some(Tok::Punct('{')) => {
                    self.skip_block()?;
                    return Ok(());
                }
                Some(Tok::Dir(d)) if STARTERS.contains(&d) => return Ok(()),
                Some(_) => self.pos += 1,
            }
        }
    }

    pub(crate) fn module(&mut self) -> Result<Ptx, PtxError> {
        let mut version = None;
        let mut target = None;
        let mut entries = Vec::new();
        let mut globals = Vec::new();
        let mut external = false;
        while let Some(tok) = self.next() {
            match tok {
                Tok::Dir(".version") => {
                    let Some(Tok::Num(v)) = self.next() else {
                        return err("`.version` without a number");
                    };
                    let (major, minor) = v.split_once('.').unwrap_or((v, "0"));
                    match (major.parse(), minor.parse()) {
                        (Ok(a), Ok(b)) => version = Some((a, b)),
                        _ => return err(format!("bad `.version {v}`")),
                    }
                }
                Tok::Dir(".target") => {
                    let first = self.ident("a target")?;
                    target.get_or_insert_with(|| first.to_string());
                    while self.eat(Tok::Punct(',')) {
                        self.ident("a target")?;
                    }
                }
                Tok::Dir(".address_size") => {
                    let bits = self.number("`.address_size`")?;
                    if bits != 32 && bits != 64 {
                        return err(format!("bad `.address_size {bits}`"));
                    }
                }
                Tok::Dir(".extern") => {
                    external = true;
                    continue;
                }
                Tok::Dir(".visible" | ".weak" | ".common") => continue,
                Tok::Dir(".entry") => {
                    if version.is_none() {
                        return err("`.entry` before `.version`");
                    }
                    if let Some(entry) = self.entry()? {
                        if !external {
                            if entries.iter().any(|e: &Entry| e.name == entry.name) {
                                return err(format!("kernel `{}` defined twice", entry.name));
                            }
                            entries.push(entry);
                        }
                    }
                }
                Tok::Dir(".func") => {
                    // Device functions: not launchable, and their bodies are not read.
                    self.skip_parens()?;
                    self.ident("a function")?;
                    self.skip_parens()?;
                    self.skip_statement()?;
                }
                Tok::Dir(space @ (".global" | ".const")) => {
                    let space = if space == ".global" {
                        ".global"
                    } else {
                        ".const"
                    };
                    let vars = self.variables(space)?;
                    if !external {
                        globals.extend(vars);
                    }
                }
                Tok::Dir(".file") => {
                    self.number("`.file`")?;
                    if !self.eat(Tok::Str) {
                        return err("`.file` without a file name");
                    }
                    while self.eat(Tok::Punct(',')) {
                        self.number("`.file`")?;
                    }
                }
                Tok::Dir(_) => self.skip_statement()?,
                Tok::Punct('{') => {
                    self.pos -= 1;
                    self.skip_block()?;
                }
                t => return err(format!("unexpected {t:?} at module scope")),
            }
            external = false;
        }
        let Some(version) = version else {
            return err("no `.version` directive");
        };
        let Some(target) = target else {
            return err("no `.target` directive");
        };
        Ok(Ptx {
            version,
            target,
            entries,
            globals,
        })
    }

    /// `.entry name ( params ) directives { body }`; None for a declaration without a body.
    fn entry(&mut self) -> Result<Option<Entry>, PtxError> {
        let name = self.ident("a kernel")?.to_string();
        let mut params = Vec::new();
        let mut offset = 0usize;
        if self.eat(Tok::Punct('(')) {
            while !self.eat(Tok::Punct(')')) {
                if !params.is_empty() {
                    self.expect(Tok::Punct(','), "`,` between parameters")?;
                }
                let (size, align) = self.param(&name)?;
                offset = offset.next_multiple_of(align);
                params.push(Param { offset, size });
                offset += size;
            }
        }
        let mut entry = Entry {
            name,
            params,
            max_threads: None,
            max_registers: None,
            shared_bytes: 0,
        };
        loop {
            match self.peek() {
                Some(Tok::Punct('{')) => break,
                Some(Tok::Punct(';')) => {
                    self.pos += 1;
                    return Ok(None);
                }
                Some(Tok::Dir(d @ (".maxntid" | ".reqntid"))) => {
                    self.pos += 1;
                    let mut threads = self.number(d)?;
                    while self.eat(Tok::Punct(',')) {
                        threads *= self.number(d)?;
                    }
                    entry.max_threads = Some(threads.min(u32::MAX as u64) as u32);
                }
                Some(Tok::Dir(".maxnreg")) => {
                    self.pos += 1;
                    entry.max_registers = Some(self.number(".maxnreg")?.min(255) as u32);
                }
                Some(_) => self.pos += 1,
                None => return err(format!("kernel `{}` has no body", entry.name)),
            }
        }
        let (start, end) = self.skip_block()?;
        entry.shared_bytes = self.shared_in(start, end);
        Ok(Some(entry))
    }

    /// One parameter: `.param [.align N] .type [.ptr .space [.align N]] name[[N]]`; returns
    /// its size and alignment (the type's size unless `.align` comes before the type).
    fn param(&mut self, kernel: &str) -> Result<(usize, usize), PtxError> {
        self.expect(Tok::Dir(".param"), "`.param`")?;
        let mut align = None;
        let mut elem = None;
        loop {
            match self.next() {
                Some(Tok::Dir(".align")) => {
                    let n = self.number("`.align`")? as usize;
                    // After the type, `.align` belongs to `.ptr` and describes the pointee.
                    if elem.is_none() {
                        if !n.is_power_of_two() {
                            return err(format!("bad `.align {n}` in `{kernel}`"));
                        }
                        align = Some(n);
                    }
                }
                Some(Tok::Dir(d)) if elem.is_none() && type_size(d).is_some() => {
                    elem = type_size(d)
                }
                Some(Tok::Dir(_)) => {}
                Some(Tok::Ident(_)) => break,
                t => return err(format!("bad parameter of `{kernel}`: {t:?}")),
            }
        }
        let Some(elem) = elem else {
            return err(format!("parameter of `{kernel}` without a type"));
        };
        let mut count = 1usize;
        while self.eat(Tok::Punct('[')) {
            count *= self.number("an array size")? as usize;
            self.expect(Tok::Punct(']'), "`]`")?;
        }
        Ok((elem * count, align.unwrap_or(elem)))
    }

    /// Module-scope variables after `.global` / `.const`, up to `;`.
    fn variables(&mut self, space: &'static str) -> Result<Vec<Variable>, PtxError> {
        let mut align = None;
        let mut elem = None;
        let mut lanes = 1u64;
        let mut float = false;
        loop {
            match self.peek() {
                Some(Tok::Dir(".align")) => {
                    self.pos += 1;
                    align = Some(self.number("`.align`")?);
                }
                Some(Tok::Dir(".attribute")) => {
                    self.pos += 1;
                    self.skip_parens()?;
                }
                Some(Tok::Dir(".v2")) => {
                    self.pos += 1;
                    lanes = 2;
                }
                Some(Tok::Dir(".v4")) => {
                    self.pos += 1;
                    lanes = 4;
                }
                Some(Tok::Dir(d)) if type_size(d).is_some() => {
                    self.pos += 1;
                    elem = type_size(d).map(|s| s as u64);
                    float = d == ".f32" || d == ".f64";
                }
                Some(Tok::Dir(_)) => self.pos += 1,
                _ => break,
            }
        }
        let Some(elem) = elem else {
            return err(format!("`{space}` variable without a type"));
        };
        let elem = elem * lanes;
        let mut vars = Vec::new();
        loop {
            let name = self.ident("a variable")?.to_string();
            let mut count: Option<u64> = Some(1);
            while self.eat(Tok::Punct('[')) {
                if self.eat(Tok::Punct(']')) {
                    count = None;
                } else {
                    let n = self.number("an array size")?;
                    count = count.map(|c| c * n);
                    self.expect(Tok::Punct(']'), "`]`")?;
                }
            }
            let mut init = Vec::new();
            let mut values = 0u64;
            if self.eat(Tok::Punct('=')) {
                let mut depth = 0;
                loop {
                    match self.peek() {
                        Some(Tok::Punct('{')) => depth += 1,
                        Some(Tok::Punct('}')) => depth -= 1,
                        Some(Tok::Punct(',' | ';')) if depth == 0 => break,
                        Some(Tok::Num(n)) => {
                            values += 1;
                            push_value(&mut init, n, (elem / lanes) as usize, float);
                        }
                        Some(Tok::Ident(_)) => values += 1,
                        None => return err("unterminated initializer"),
                        Some(_) => {}
                    }
                    self.pos += 1;
                }
            }
            let count = count.unwrap_or(values.div_ceil(lanes).max(1));
            vars.push(Variable {
                name,
                space,
                size: elem * count,
                align: align.unwrap_or(elem / lanes),
                init,
            });
            if !self.eat(Tok::Punct(',')) {
                break;
            }
        }
        self.expect(Tok::Punct(';'), "`;` after a variable")?;
        Ok(vars)
    }

    /// Bytes of `.shared` variables declared in a body.
    fn shared_in(&mut self, start: usize, end: usize) -> u64 {
        let resume = self.pos;
        let mut total = 0u64;
        let mut i = start;
        while i < end {
            if self.toks[i] == Tok::Dir(".shared") {
                self.pos = i + 1;
                if let Ok(vars) = self.variables(".global") {
                    for v in vars {
                        total = total.next_multiple_of(v.align.max(1)) + v.size;
                    }
                }
                i = self.pos.max(i + 1);
            } else {
                i += 1;
            }
        }
        self.pos = resume;
        total
    }
}

/// Appends one initializer value as `size` little-endian bytes.
fn push_value(out: &mut Vec<u8>, n: &str, size: usize, float: bool) {
    let bits: u64 = if let Some(hex) = n.strip_prefix("0f").or_else(|| n.strip_prefix("0F")) {
        u32::from_str_radix(hex, 16).map_or(0, u64::from)
    } else if let Some(hex) = n.strip_prefix("0d").or_else(|| n.strip_prefix("0D")) {
        u64::from_str_radix(hex, 16).unwrap_or(0)
    } else if float || n.contains('.') {
        let v: f64 = n.parse().unwrap_or(0.0);
        if size == 4 {
            u64::from((v as f32).to_bits())
        } else {
            v.to_bits()
        }
    } else {
        parse_uint(n).unwrap_or(0)
    };
    out.extend_from_slice(&bits.to_le_bytes()[..size.min(8)]);
    out.extend(std::iter::repeat_n(0, size.saturating_sub(8)));
}

/// Parses PTX text.
pub(crate) fn parse(text: &str) -> Result<Ptx, PtxError> {
    let toks = tokenize(text)?;
    Parser { toks, pos: 0 }.module()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TESSERA: &str = r#"
// Tessera's kernels.
.version 7.0
.target sm_70
.address_size 64

.visible .entry tessera_spin(
	.param .u64 ns
)
{
	.reg .pred	%p<2>;
	.reg .b64	%rd<5>;
	ld.param.u64	%rd1, [ns];
$L_spin_wait:
	@%p1 bra	$L_spin_wait;
	ret;
}

.visible .entry tessera_fill_u32(
	.param .u64 ptr,
	.param .u64 count,
	.param .u32 value
)
{
	ld.param.u64	%rd1, [ptr];
	ret;
}
"#;

    fn offsets(e: &Entry) -> Vec<(usize, usize)> {
        e.params.iter().map(|p| (p.offset, p.size)).collect()
    }

    #[test]
    fn reads_the_tessera_kernels() {
        let m = parse(TESSERA).unwrap();
        assert_eq!(m.version, (7, 0));
        assert_eq!(m.target, "sm_70");
        assert_eq!(m.entries.len(), 2);
        assert_eq!(m.entries[0].name, "tessera_spin");
        assert_eq!(offsets(&m.entries[0]), [(0, 8)]);
        assert_eq!(m.entries[1].name, "tessera_fill_u32");
        assert_eq!(offsets(&m.entries[1]), [(0, 8), (8, 8), (16, 4)]);
        assert_eq!(m.entries[1].params_size(), 20);
    }

    /// The workload's kernels, whose signatures are a contract with the simulator.
    #[test]
    fn reads_the_workload_kernels_file() {
        let m = parse(include_str!("../../../../../bench/kernels/tessera.ptx")).unwrap();
        let spin = m.entries.iter().find(|e| e.name == "tessera_spin").unwrap();
        assert_eq!(offsets(spin), [(0, 8)]);
        let fill = m
            .entries
            .iter()
            .find(|e| e.name == "tessera_fill_u32")
            .unwrap();
        assert_eq!(offsets(fill), [(0, 8), (8, 8), (16, 4)]);
    }

    #[test]
    fn aligns_each_parameter_to_its_size_or_declared_alignment() {
        let m = parse(
            ".version 8.0\n.target sm_90a\n.address_size 64\n\
             .visible .entry k(.param .u8 a, .param .u32 b, .param .u16 c, .param .f64 d,\n\
               .param .align 16 .b8 s[20], .param .u8 e, .param .u64 .ptr .global .align 128 p,\n\
               .param .b32 arr[3])\n\
             .maxntid 128, 2, 1\n.maxnreg 40\n{ ret; }",
        )
        .unwrap();
        let k = &m.entries[0];
        assert_eq!(
            offsets(k),
            [
                (0, 1),
                (4, 4),
                (8, 2),
                (16, 8),
                (32, 20),
                (52, 1),
                (56, 8),
                (64, 12)
            ]
        );
        assert_eq!(k.max_threads, Some(256));
        assert_eq!(k.max_registers, Some(40));
        assert_eq!(m.version, (8, 0));
    }

    #[test]
    fn ptr_attributes_without_spaces() {
        let m = parse(
            ".version 7.8 .target sm_80 .entry k(.param .u32 n, .param .u64 .ptr.global.align 16 p) {}",
        )
        .unwrap();
        assert_eq!(offsets(&m.entries[0]), [(0, 4), (8, 8)]);
    }

    #[test]
    fn kernels_without_parameters_and_device_functions() {
        let m = parse(
            ".version 7.0\n.target sm_70\n\
             .func (.reg .b32 r) helper(.reg .b32 x) { mov.b32 r, x; ret; }\n\
             .visible .func nothing() { ret; }\n\
             .extern .func ext(.param .b32 a);\n\
             .entry empty { ret; }\n\
             .entry unit() { call nothing, (); }\n\
             .extern .entry declared(.param .u64 p);\n",
        )
        .unwrap();
        let names: Vec<&str> = m.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["empty", "unit"]);
        assert!(m.entries.iter().all(|e| e.params.is_empty()));
    }

    #[test]
    fn module_variables_and_shared_memory() {
        let m = parse(
            ".version 7.0\n.target sm_70\n\
             .global .align 4 .u32 counter = 7;\n\
             .global .align 8 .b8 buf[64];\n\
             .const .f32 coeffs[] = {1.0, 0f40000000, 3.0};\n\
             .global .u16 a, b[4];\n\
             .extern .global .u32 elsewhere;\n\
             .file 1 \"k.cu\", 1700000000, 1234\n\
             .entry k() { .shared .align 4 .b8 tile[1024]; .shared .u64 x; ret; }\n",
        )
        .unwrap();
        let g: Vec<(&str, u64, u64)> = m
            .globals
            .iter()
            .map(|v| (v.name.as_str(), v.size, v.align))
            .collect();
        assert_eq!(
            g,
            [
                ("counter", 4, 4),
                ("buf", 64, 8),
                ("coeffs", 12, 4),
                ("a", 2, 2),
                ("b", 8, 2)
            ]
        );
        assert_eq!(m.globals[0].init, 7u32.to_le_bytes());
        let coeffs: Vec<f32> = m.globals[2]
            .init
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(coeffs, [1.0, 2.0, 3.0]);
        assert_eq!(m.entries[0].shared_bytes, 1032);
    }

    #[test]
    fn refuses_what_is_not_ptx() {
        assert!(parse("").is_err());
        assert!(parse("hello world").is_err());
        assert!(parse(".target sm_80\n.entry k() {}").is_err());
        assert!(parse(".version 7.0\n.entry k() {}").is_err());
        assert!(parse(".version 7.0\n.target sm_70\n.entry k( { }").is_err());
        assert!(parse(".version 7.0\n.target sm_70\n.entry k() { ret;").is_err());
        assert!(parse(".version 7.0\n.target sm_70\n.entry k(.param .u64) {}").is_err());
        assert!(parse(".version 7.0\n.target sm_70\n.entry k(.param x) {}").is_err());
        assert!(parse(".version 7.0\n.target sm_70\n.entry k() {}\n.entry k() {}").is_err());
        assert!(parse("/* unterminated").is_err());
    }
}
