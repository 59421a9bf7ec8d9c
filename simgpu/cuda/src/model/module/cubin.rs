//! Cubins: the ELF images of machine code (SASS) for one GPU architecture, as NVRTC,
//! nvJitLink, `ptxas` and the fat binaries of compiled libraries carry them. Nothing in them
//! runs here; what a driver needs to know of them is read: the architecture (from the ELF
//! header's flags), the kernels (the entry functions in the symbol table) and each kernel's
//! parameter layout and limits (the attributes of its `.nv.info.<kernel>` section).
//!
//! The format, as far as it is used here (all little-endian, ELF64):
//! - `e_machine` is 190 (CUDA). The architecture is `sm_<n>` with `n` in the low byte of
//!   `e_flags` for ELF ABI versions before 8, and in bits 8..16 from version 8 on, where bit
//!   3 marks an architecture-specific (`sm_90a`-like) image.
//! - A kernel is a `FUNC` symbol whose `st_other` has bit 4 set (an entry), with (unless it
//!   takes no parameters) a `.nv.info.<name>` section: a sequence of attributes, each a format byte, an attribute
//!   byte and then, for format 4, a 16-bit length and that many bytes, else a 16-bit value.
//! - Parameter attribute (0x17): a 32-bit index, 16-bit ordinal, 16-bit offset, and a word
//!   whose bits 18.. hold the size in bytes; its later form (0x45) holds the ordinal and the
//!   offset in one word and the size in the 16 bits after it. 0x19 is the parameter
//!   buffer's size; 0x05 the maximum threads (x, y, z words), 0x10 the required ones.
//! - The file-wide `.nv.info` section's attribute 0x2f gives a kernel's registers (the
//!   kernel's symbol index, then the count); `.nv.shared.<name>` is its static shared memory.
//! - A variable (`__device__`, `__constant__`) is an `OBJECT` symbol defined in a section:
//!   its value is its offset there, its size the symbol's, its first value the section's
//!   bytes (none for a section without contents).

use super::ptx::{Entry, Param, Variable};
use std::collections::HashMap;

/// `EM_CUDA`.
const MACHINE_CUDA: u16 = 190;
/// The ELF ABI version from which the architecture moved to bits 8..16 of `e_flags`.
const ABI_WITH_WIDE_FLAGS: u8 = 8;
/// `st_other` bit of a kernel entry.
const ENTRY: u8 = 0x10;
/// `STT_OBJECT`.
const OBJECT: u8 = 1;
/// `STT_FUNC`.
const FUNC: u8 = 2;
/// Section types.
const SYMTAB: u32 = 2;
const NOBITS: u32 = 8;
/// Section indexes from here on are special (absolute, common, ...), not sections.
const FIRST_RESERVED_INDEX: u16 = 0xff00;
/// The alignment simgpu gives every variable.
const VARIABLE_ALIGN: u64 = 16;

/// `.nv.info` formats and attributes.
mod attr {
    pub const FORMAT_SIZED: u8 = 4;
    pub const MAX_THREADS: u8 = 0x05;
    pub const REQUIRED_THREADS: u8 = 0x10;
    pub const PARAM_INFO: u8 = 0x17;
    pub const PARAMS_SIZE: u8 = 0x19;
    pub const REGISTERS: u8 = 0x2f;
    pub const PARAM_INFO_V2: u8 = 0x45;
}

/// Stands for "any device" where code is read for what it declares, not to run it.
pub(crate) const ANY_DEVICE: (u32, u32) = (u32::MAX, 0);

/// A GPU architecture a cubin is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Arch {
    pub major: u32,
    pub minor: u32,
    /// Built for exactly this architecture's own features (`sm_90a`): runs on no other.
    pub specific: bool,
}

impl Arch {
    /// Whether machine code for this architecture runs on a device of compute capability
    /// `cc`: the same major version, and a minor version no later than the device's (exactly
    /// the device's for architecture-specific code).
    pub(crate) fn runs_on(&self, cc: (u32, u32)) -> bool {
        if cc == ANY_DEVICE {
            return true;
        }
        self.major == cc.0
            && if self.specific {
                self.minor == cc.1
            } else {
                self.minor <= cc.1
            }
    }

    /// The architecture of an `sm_<n>` number (`80` → 8.0).
    pub(crate) fn of_number(n: u32, specific: bool) -> Arch {
        Arch {
            major: n / 10,
            minor: n % 10,
            specific,
        }
    }
}

/// A parsed cubin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cubin {
    pub arch: Arch,
    /// Its kernels, in symbol-table order.
    pub entries: Vec<Entry>,
    /// Its variables, in symbol-table order.
    pub globals: Vec<Variable>,
}

/// Why bytes are not a cubin simgpu can read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CubinError(pub &'static str);

/// A section header's fields that matter here.
#[derive(Debug, Clone, Copy)]
struct Section {
    name: u32,
    kind: u32,
    offset: usize,
    size: usize,
    link: u32,
}

/// Little-endian reads that fail instead of reading past the end.
struct Bytes<'a>(&'a [u8]);

impl<'a> Bytes<'a> {
    fn get<const N: usize>(&self, at: usize) -> Result<[u8; N], CubinError> {
        at.checked_add(N)
            .and_then(|end| self.0.get(at..end))
            .and_then(|s| s.try_into().ok())
            .ok_or(CubinError("truncated"))
    }
    fn u8(&self, at: usize) -> Result<u8, CubinError> {
        Ok(self.get::<1>(at)?[0])
    }
    fn u16(&self, at: usize) -> Result<u16, CubinError> {
        Ok(u16::from_le_bytes(self.get(at)?))
    }
    fn u32(&self, at: usize) -> Result<u32, CubinError> {
        Ok(u32::from_le_bytes(self.get(at)?))
    }
    fn u64(&self, at: usize) -> Result<u64, CubinError> {
        Ok(u64::from_le_bytes(self.get(at)?))
    }
    fn range(&self, offset: usize, size: usize) -> Result<&'a [u8], CubinError> {
        offset
            .checked_add(size)
            .and_then(|end| self.0.get(offset..end))
            .ok_or(CubinError("a section lies past the end of the image"))
    }
}

/// The NUL-terminated name at `at` in a string table.
fn name_at(table: &[u8], at: u32) -> Result<&str, CubinError> {
    let rest = table
        .get(at as usize..)
        .ok_or(CubinError("a name lies past its string table"))?;
    let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    std::str::from_utf8(&rest[..end]).map_err(|_| CubinError("a name is not UTF-8"))
}

/// Whether `bytes` start like a CUDA ELF image.
pub(crate) fn is_cubin(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\x7fELF") && bytes.get(0x12..0x14) == Some(&MACHINE_CUDA.to_le_bytes())
}

/// The length of the ELF image at the start of `head`, from its header alone (the section
/// header table, which compilers put last, and every section it lists): `header` is the
/// first 64 bytes, `table` reads the section header table once its place is known.
pub(crate) fn image_len(
    header: &[u8; 64],
    table: impl FnOnce(usize, usize) -> Vec<u8>,
) -> Result<usize, CubinError> {
    let h = Bytes(header);
    let shoff = usize::try_from(h.u64(0x28)?).map_err(|_| CubinError("huge image"))?;
    let shentsize = usize::from(h.u16(0x3a)?);
    let shnum = usize::from(h.u16(0x3c)?);
    if shentsize < 64 || shnum == 0 || shnum > 1 << 14 || shoff > 1 << 34 {
        return Err(CubinError("no usable section header table"));
    }
    let table_len = shentsize * shnum;
    let t = table(shoff, table_len);
    let t = Bytes(&t);
    let mut end = shoff + table_len;
    for i in 0..shnum {
        let s = i * shentsize;
        let kind = t.u32(s + 4)?;
        let offset = usize::try_from(t.u64(s + 0x18)?).unwrap_or(usize::MAX);
        let size = usize::try_from(t.u64(s + 0x20)?).unwrap_or(usize::MAX);
        // SHT_NOBITS takes no room in the file.
        if kind != 8 {
            end = end.max(offset.saturating_add(size));
        }
    }
    if end > 1 << 34 {
        return Err(CubinError("huge image"));
    }
    Ok(end)
}

/// Reads a cubin.
pub(crate) fn parse(bytes: &[u8]) -> Result<Cubin, CubinError> {
    if !is_cubin(bytes) {
        return Err(CubinError("not a CUDA ELF image"));
    }
    let b = Bytes(bytes);
    if b.u8(4)? != 2 || b.u8(5)? != 1 {
        return Err(CubinError("not a 64-bit little-endian ELF image"));
    }
    let flags = b.u32(0x30)?;
    let arch = if b.u8(8)? >= ABI_WITH_WIDE_FLAGS {
        Arch::of_number((flags >> 8) & 0xff, flags & 0x8 != 0)
    } else {
        Arch::of_number(flags & 0xff, false)
    };
    let shoff = usize::try_from(b.u64(0x28)?).unwrap_or(usize::MAX);
    let shentsize = usize::from(b.u16(0x3a)?);
    let shnum = usize::from(b.u16(0x3c)?);
    let shstrndx = usize::from(b.u16(0x3e)?);
    if shentsize < 64 {
        return Err(CubinError("section headers too small"));
    }
    let sections = (0..shnum)
        .map(|i| {
            // Saturating: an offset past the end fails the read below.
            let s = shoff.saturating_add(i * shentsize);
            Ok(Section {
                name: b.u32(s)?,
                kind: b.u32(s + 4)?,
                offset: usize::try_from(b.u64(s + 0x18)?).unwrap_or(usize::MAX),
                size: usize::try_from(b.u64(s + 0x20)?).unwrap_or(usize::MAX),
                link: b.u32(s + 0x28)?,
            })
        })
        .collect::<Result<Vec<_>, CubinError>>()?;
    let names = sections
        .get(shstrndx)
        .ok_or(CubinError("no section name table"))?;
    let names = b.range(names.offset, names.size)?;
    let mut by_name = HashMap::new();
    for s in &sections {
        by_name.insert(name_at(names, s.name)?, *s);
    }
    let symtab = sections
        .iter()
        .find(|s| s.kind == SYMTAB)
        .ok_or(CubinError("no symbol table"))?;
    let strtab = sections
        .get(symtab.link as usize)
        .ok_or(CubinError("no symbol name table"))?;
    let strings = b.range(strtab.offset, strtab.size)?;
    let symbols = b.range(symtab.offset, symtab.size)?;
    let registers = by_name
        .get(".nv.info")
        .map(|s| registers_by_symbol(b.range(s.offset, s.size)?))
        .transpose()?
        .unwrap_or_default();

    let mut entries = Vec::new();
    let mut globals = Vec::new();
    for (index, sym) in symbols.chunks_exact(24).enumerate() {
        let s = Bytes(sym);
        let (info, other) = (s.u8(4)?, s.u8(5)?);
        if info & 0xf == OBJECT {
            if let Some(v) = variable(&b, &sections, names, strings, &s)? {
                globals.push(v);
            }
            continue;
        }
        if info & 0xf != FUNC || other & ENTRY == 0 {
            continue;
        }
        let name = name_at(strings, s.u32(0)?)?;
        // A kernel without attributes takes no parameters.
        let attributes = match by_name.get(format!(".nv.info.{name}").as_str()) {
            Some(info) => b.range(info.offset, info.size)?,
            None => &[],
        };
        let mut entry = kernel(name, attributes)?;
        entry.max_registers = registers.get(&(index as u32)).copied();
        entry.shared_bytes = by_name
            .get(format!(".nv.shared.{name}").as_str())
            .map_or(0, |s| s.size as u64);
        entries.push(entry);
    }
    Ok(Cubin {
        arch,
        entries,
        globals,
    })
}

/// The variable an `OBJECT` symbol defines, if it defines one in a section.
fn variable(
    b: &Bytes<'_>,
    sections: &[Section],
    names: &[u8],
    strings: &[u8],
    s: &Bytes<'_>,
) -> Result<Option<Variable>, CubinError> {
    let index = s.u16(6)?;
    let size = s.u64(16)?;
    if index == 0 || index >= FIRST_RESERVED_INDEX || size == 0 {
        return Ok(None);
    }
    let section = sections
        .get(usize::from(index))
        .ok_or(CubinError("a symbol in no section"))?;
    let offset = usize::try_from(s.u64(8)?).map_err(|_| CubinError("huge offset"))?;
    let len = usize::try_from(size).map_err(|_| CubinError("huge variable"))?;
    let init = if section.kind == NOBITS {
        Vec::new()
    } else {
        b.range(section.offset.saturating_add(offset), len)?
            .to_vec()
    };
    let space = if name_at(names, section.name)?.starts_with(".nv.constant") {
        "const"
    } else {
        "global"
    };
    Ok(Some(Variable {
        name: name_at(strings, s.u32(0)?)?.to_string(),
        space,
        size,
        align: VARIABLE_ALIGN,
        init,
    }))
}

/// One attribute of an `.nv.info` section: its id and its bytes (for a 16-bit value, the
/// two bytes).
fn attributes(section: &[u8]) -> Result<Vec<(u8, &[u8])>, CubinError> {
    let b = Bytes(section);
    let mut at = 0;
    let mut out = Vec::new();
    while at + 4 <= section.len() {
        let (format, id) = (b.u8(at)?, b.u8(at + 1)?);
        if format == attr::FORMAT_SIZED {
            let len = usize::from(b.u16(at + 2)?);
            out.push((id, b.range(at + 4, len)?));
            at += 4 + len;
        } else {
            out.push((id, b.range(at + 2, 2)?));
            at += 4;
        }
    }
    Ok(out)
}

/// Registers per kernel, by the kernel's symbol index.
fn registers_by_symbol(section: &[u8]) -> Result<HashMap<u32, u32>, CubinError> {
    let mut out = HashMap::new();
    for (id, value) in attributes(section)? {
        if id == attr::REGISTERS && value.len() == 8 {
            let v = Bytes(value);
            out.insert(v.u32(0)?, v.u32(4)?);
        }
    }
    Ok(out)
}

/// A kernel from its `.nv.info.<name>` section.
fn kernel(name: &str, section: &[u8]) -> Result<Entry, CubinError> {
    let mut params: Vec<(u16, Param)> = Vec::new();
    let mut params_size = None;
    let mut max_threads = None;
    for (id, value) in attributes(section)? {
        let v = Bytes(value);
        match id {
            attr::PARAM_INFO if value.len() >= 12 => {
                let size = (v.u32(8)? >> 18) as usize;
                params.push((
                    v.u16(4)?,
                    Param {
                        offset: usize::from(v.u16(6)?),
                        size,
                    },
                ));
            }
            attr::PARAM_INFO_V2 if value.len() >= 12 => {
                let packed = v.u32(4)?;
                params.push((
                    (packed & 0xffff) as u16,
                    Param {
                        offset: (packed >> 16) as usize,
                        size: usize::from(v.u16(8)?),
                    },
                ));
            }
            attr::PARAMS_SIZE if value.len() == 2 => params_size = Some(usize::from(v.u16(0)?)),
            attr::MAX_THREADS | attr::REQUIRED_THREADS if value.len() == 12 => {
                let threads = v.u32(0)?.max(1) * v.u32(4)?.max(1) * v.u32(8)?.max(1);
                max_threads = Some(threads);
            }
            _ => {}
        }
    }
    params.sort_by_key(|(ordinal, _)| *ordinal);
    params.dedup_by_key(|(ordinal, _)| *ordinal);
    let params: Vec<Param> = params.into_iter().map(|(_, p)| p).collect();
    let declared = params.last().map_or(0, |p| p.offset + p.size);
    if params_size.is_some_and(|total| total < declared) {
        return Err(CubinError("parameters past the parameter buffer"));
    }
    Ok(Entry {
        name: name.to_string(),
        params,
        max_threads,
        max_registers: None,
        shared_bytes: 0,
    })
}

/// Writes a cubin for `arch` declaring `entries` (their names, parameter layouts and thread
/// limits), in the format [`parse`] reads: what simgpu's linker hands back, since there is no
/// machine code to produce here.
pub(crate) fn write(arch: Arch, entries: &[Entry]) -> Vec<u8> {
    // Section names and symbol names share one string table.
    let mut strings = vec![0u8];
    let mut add_string = |s: &str| {
        let at = strings.len() as u32;
        strings.extend(s.as_bytes());
        strings.push(0);
        at
    };
    let strtab_name = add_string(".strtab");
    let symtab_name = add_string(".symtab");
    let info_names: Vec<u32> = entries
        .iter()
        .map(|e| add_string(&format!(".nv.info.{}", e.name)))
        .collect();
    let symbol_names: Vec<u32> = entries.iter().map(|e| add_string(&e.name)).collect();

    let infos: Vec<Vec<u8>> = entries.iter().map(info_section).collect();
    let mut symbols = vec![0u8; 24];
    for (i, name) in symbol_names.iter().enumerate() {
        let mut s = [0u8; 24];
        s[0..4].copy_from_slice(&name.to_le_bytes());
        s[4] = 0x10 | FUNC; // global binding, function
        s[5] = ENTRY;
        // The kernel's section: its `.nv.info` stands in for its absent code.
        s[6..8].copy_from_slice(&((3 + i) as u16).to_le_bytes());
        symbols.extend(s);
    }

    // Layout: header, string table, symbol table, info sections, section headers.
    let mut body = Vec::new();
    let mut place = |bytes: &[u8]| {
        let offset = 64 + body.len();
        body.extend(bytes);
        while body.len() % 8 != 0 {
            body.push(0);
        }
        (offset, bytes.len())
    };
    let strtab = place(&strings);
    let symtab = place(&symbols);
    let info_places: Vec<(usize, usize)> = infos.iter().map(|i| place(i)).collect();
    let shoff = 64 + body.len();
    let mut headers = vec![0u8; 64]; // the null section
    let mut header = |name: u32, kind: u32, (offset, size): (usize, usize), link: u32, ent: u64| {
        let mut h = [0u8; 64];
        h[0..4].copy_from_slice(&name.to_le_bytes());
        h[4..8].copy_from_slice(&kind.to_le_bytes());
        h[0x18..0x20].copy_from_slice(&(offset as u64).to_le_bytes());
        h[0x20..0x28].copy_from_slice(&(size as u64).to_le_bytes());
        h[0x28..0x2c].copy_from_slice(&link.to_le_bytes());
        h[0x38..0x40].copy_from_slice(&ent.to_le_bytes());
        headers.extend(h);
    };
    header(strtab_name, 3, strtab, 0, 0);
    header(symtab_name, SYMTAB, symtab, 1, 24);
    for (name, place) in info_names.iter().zip(&info_places) {
        // SHT_LOPROC: the CUDA info sections' type.
        header(*name, 0x7000_0000, *place, 2, 0);
    }
    let shnum = 3 + entries.len();

    let mut out = vec![0u8; 64];
    out[0..4].copy_from_slice(b"\x7fELF");
    out[4] = 2; // 64-bit
    out[5] = 1; // little-endian
    out[6] = 1; // ELF version
    out[7] = 0x33; // the CUDA OS ABI
    out[8] = 7; // the ABI version with the architecture in the flags' low byte
    out[0x10..0x12].copy_from_slice(&2u16.to_le_bytes()); // executable
    out[0x12..0x14].copy_from_slice(&MACHINE_CUDA.to_le_bytes());
    out[0x14..0x18].copy_from_slice(&1u32.to_le_bytes());
    out[0x28..0x30].copy_from_slice(&(shoff as u64).to_le_bytes());
    let number = arch.major * 10 + arch.minor;
    out[0x30..0x34].copy_from_slice(&(number | number << 16).to_le_bytes());
    out[0x34..0x36].copy_from_slice(&64u16.to_le_bytes());
    out[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
    out[0x3c..0x3e].copy_from_slice(&(shnum as u16).to_le_bytes());
    out[0x3e..0x40].copy_from_slice(&1u16.to_le_bytes()); // names in the string table
    out.extend(body);
    out.extend(headers);
    out
}

/// The `.nv.info.<name>` attributes of a kernel.
fn info_section(entry: &Entry) -> Vec<u8> {
    let mut out = Vec::new();
    for (ordinal, p) in entry.params.iter().enumerate() {
        out.extend([attr::FORMAT_SIZED, attr::PARAM_INFO, 12, 0]);
        out.extend(0u32.to_le_bytes());
        out.extend((ordinal as u16).to_le_bytes());
        out.extend((p.offset as u16).to_le_bytes());
        out.extend(((p.size as u32) << 18 | 0xf000).to_le_bytes());
    }
    // A 16-bit value attribute.
    out.extend([3, attr::PARAMS_SIZE]);
    out.extend((entry.params_size() as u16).to_le_bytes());
    if let Some(threads) = entry.max_threads {
        out.extend([attr::FORMAT_SIZED, attr::MAX_THREADS, 12, 0]);
        out.extend(threads.to_le_bytes());
        out.extend(1u32.to_le_bytes());
        out.extend(1u32.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, sizes: &[usize]) -> Entry {
        let mut offset = 0usize;
        let params = sizes
            .iter()
            .map(|&size| {
                offset = offset.next_multiple_of(size.clamp(1, 8));
                let p = Param { offset, size };
                offset += size;
                p
            })
            .collect();
        Entry {
            name: name.to_string(),
            params,
            max_threads: None,
            max_registers: None,
            shared_bytes: 0,
        }
    }

    #[test]
    fn what_is_written_reads_back() {
        let arch = Arch::of_number(86, false);
        let entries = vec![entry("tessera_spin", &[8]), entry("add", &[8, 8, 4, 8, 1])];
        let bytes = write(arch, &entries);
        assert!(is_cubin(&bytes));
        let header: [u8; 64] = bytes[..64].try_into().unwrap();
        let len = image_len(&header, |at, n| bytes[at..at + n].to_vec()).unwrap();
        assert_eq!(len, bytes.len());
        let cubin = parse(&bytes).unwrap();
        assert_eq!(cubin.arch, arch);
        assert_eq!(cubin.entries, entries);
        assert!(cubin.globals.is_empty());
        assert_eq!(cubin.entries[1].params_size(), 33);
    }

    #[test]
    fn architectures_run_where_a_gpu_runs_them() {
        let sm80 = Arch::of_number(80, false);
        assert!(sm80.runs_on((8, 0)) && sm80.runs_on((8, 6)));
        assert!(!sm80.runs_on((9, 0)) && !sm80.runs_on((7, 5)));
        let sm90a = Arch::of_number(90, true);
        assert!(sm90a.runs_on((9, 0)) && !sm90a.runs_on((9, 1)));
        assert!(!Arch::of_number(86, false).runs_on((8, 0)));
    }

    #[test]
    fn the_newer_abi_keeps_the_architecture_in_the_second_byte() {
        let mut bytes = write(Arch::of_number(80, false), &[entry("k", &[4])]);
        bytes[8] = 8;
        bytes[0x30..0x34].copy_from_slice(&(100u32 << 8 | 0x8).to_le_bytes());
        let cubin = parse(&bytes).unwrap();
        assert_eq!(cubin.arch, Arch::of_number(100, true));
    }

    #[test]
    fn garbage_is_refused_not_panicked_on() {
        let good = write(Arch::of_number(80, false), &[entry("k", &[8, 4])]);
        // The last cut ends inside the last section header's offset field.
        for cut in [10, 64, 100, good.len() - 36] {
            assert!(parse(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad = good.clone();
        bad[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(parse(&bad).is_err());
        assert!(parse(b"\x7fELF").is_err());
    }
}
