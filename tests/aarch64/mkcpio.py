#!/usr/bin/env python3
"""Write a directory as a newc cpio archive (an initramfs), adding
/dev/console, with no root needed: tests/aarch64/run.sh.

usage: mkcpio.py DIR OUT.cpio"""
import os
import stat
import sys


def record(out, ino, name, mode, data=b"", nlink=1, rdev=(0, 0)):
    name_bytes = name.encode() + b"\0"
    fields = (ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rdev[0], rdev[1], len(name_bytes), 0)
    out.write(b"070701" + "".join("%08X" % f for f in fields).encode() + name_bytes)
    out.write(b"\0" * (-(110 + len(name_bytes)) % 4))
    out.write(data)
    out.write(b"\0" * (-len(data) % 4))


def main(src, dst):
    ino = 1
    with open(dst, "wb") as out:
        for root, dirs, files in os.walk(src):
            dirs.sort()
            for name in sorted(dirs) + sorted(files):
                path = os.path.join(root, name)
                rel = os.path.relpath(path, src)
                st = os.lstat(path)
                if stat.S_ISLNK(st.st_mode):
                    record(out, ino, rel, st.st_mode, os.readlink(path).encode())
                elif stat.S_ISDIR(st.st_mode):
                    record(out, ino, rel, st.st_mode, nlink=2)
                else:
                    with open(path, "rb") as f:
                        record(out, ino, rel, st.st_mode, f.read())
                ino += 1
        record(out, ino, "dev/console", stat.S_IFCHR | 0o600, rdev=(5, 1))
        record(out, 0, "TRAILER!!!", 0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
