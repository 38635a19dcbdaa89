//! The memory placement works on: a stopped process, or a buffer.

use super::*;

/// What placement needs of a target: its memory, and executable memory
/// mapped near an address. [`Stopped`] is the real one; [`Buffer`] holds
/// the bytes of a made-up address space for tests.
pub trait Memory {
    /// The process (for the unwinders' map of our code).
    fn pid(&self) -> i32;
    fn read(&self, at: u64, len: usize) -> Result<Vec<u8>, TargetError>;
    fn write(&mut self, at: u64, bytes: &[u8]) -> Result<(), TargetError>;
    /// A code region within a patch jump's reach of `near`, `size` bytes
    /// for trampolines after the artifact's blob (`inject::code`).
    fn code_near(&mut self, a: &Artifact, near: u64, size: u64) -> Result<CodeRegion, TargetError>;
    /// A page for veneers within a patch jump's reach of `near`
    /// (`inject::veneer_page`), or why there is none.
    fn veneer_page(&mut self, near: u64) -> Result<CodeRegion, String>;
}

impl Memory for Stopped {
    fn pid(&self) -> i32 {
        Stopped::pid(self)
    }

    fn read(&self, at: u64, len: usize) -> Result<Vec<u8>, TargetError> {
        Ok(Stopped::read(self, at, len)?)
    }

    fn write(&mut self, at: u64, bytes: &[u8]) -> Result<(), TargetError> {
        Ok(Stopped::write(self, at, bytes)?)
    }

    fn code_near(&mut self, a: &Artifact, near: u64, size: u64) -> Result<CodeRegion, TargetError> {
        Ok(inject::code(self, a, near, size)?)
    }

    fn veneer_page(&mut self, near: u64) -> Result<CodeRegion, String> {
        inject::veneer_page(self, near).map_err(|e| e.to_string())
    }
}

/// A made-up address space: mapped ranges of bytes. Code regions are
/// placed where `code_at` says (the next one 64 KiB on), veneer pages at
/// `veneers_at`; reading or writing outside a range fails as an unmapped
/// page would.
pub struct Buffer {
    ranges: Vec<(u64, Vec<u8>)>,
    pub code_at: u64,
    pub veneers_at: Option<u64>,
}

impl Buffer {
    pub fn new(code_at: u64) -> Buffer {
        Buffer { ranges: Vec::new(), code_at, veneers_at: None }
    }

    /// Map `bytes` at `at`.
    pub fn map(&mut self, at: u64, bytes: Vec<u8>) {
        self.ranges.push((at, bytes));
    }

    fn range(&self, at: u64, len: usize) -> Option<(usize, usize)> {
        self.ranges.iter().enumerate().find_map(|(i, (start, b))| {
            let off = at.checked_sub(*start)? as usize;
            (off + len <= b.len()).then_some((i, off))
        })
    }
}

impl Memory for Buffer {
    fn pid(&self) -> i32 {
        0
    }

    fn read(&self, at: u64, len: usize) -> Result<Vec<u8>, TargetError> {
        let (i, off) = self.range(at, len).ok_or_else(|| TargetError::Unsupported(format!("no memory at {at:#x}")))?;
        Ok(self.ranges[i].1[off..off + len].to_vec())
    }

    fn write(&mut self, at: u64, bytes: &[u8]) -> Result<(), TargetError> {
        let (i, off) =
            self.range(at, bytes.len()).ok_or_else(|| TargetError::Unsupported(format!("no memory at {at:#x}")))?;
        self.ranges[i].1[off..off + bytes.len()].copy_from_slice(bytes);
        Ok(())
    }

    fn code_near(&mut self, a: &Artifact, _near: u64, size: u64) -> Result<CodeRegion, TargetError> {
        let trap = 16u64;
        let size = (size + trap + a.code.len() as u64).next_multiple_of(4096);
        let remote = self.code_at;
        self.code_at += size.max(64 << 10);
        let mut bytes = arch::trap_fill(trap as usize);
        bytes.extend_from_slice(&a.code);
        bytes.resize(size as usize, 0);
        self.map(remote, bytes);
        let blob = remote + trap;
        Ok(CodeRegion { remote, size, blob, next: blob + a.code.len() as u64 })
    }

    fn veneer_page(&mut self, _near: u64) -> Result<CodeRegion, String> {
        let remote = self.veneers_at.take().ok_or("no room for a veneer page")?;
        self.map(remote, vec![0; 4096]);
        Ok(CodeRegion { remote, size: 4096, blob: remote, next: remote })
    }
}
