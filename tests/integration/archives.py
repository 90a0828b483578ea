"""Archives for the archive suite (test_archive.c): python3 archives.py OUTDIR writes each as
OUTDIR/NAME. The hostile ones must all be refused by PUT ?archive= with nothing written."""
import io
import os
import struct
import sys
import tarfile
import zipfile
import zlib


def tar_bytes(members, fmt=tarfile.PAX_FORMAT):
    """members: (TarInfo, bytes or None)"""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for info, data in members:
            t.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def info(name, type_=tarfile.REGTYPE, data=b"", mode=0o644, linkname=""):
    i = tarfile.TarInfo(name)
    i.type = type_
    i.mode = mode
    i.mtime = 1700000000
    i.linkname = linkname
    i.size = len(data) if type_ == tarfile.REGTYPE else 0
    return i, (data if type_ == tarfile.REGTYPE else None)


def bomb_gz(size):
    """A tar.gz of one file of size zero bytes (a multiple of a MiB), its MiB deflated once."""
    head = tarfile.TarInfo("zeros")
    head.size = size
    head.mtime = 1700000000
    raw = head.tobuf(format=tarfile.PAX_FORMAT)
    return gz_repeat(bytes(1 << 20), size >> 20, bytes((512 - size % 512) % 512 + 1024), raw)


def gz_repeat(unit, times, tail, head=b""):
    """A gzip of head, unit times over, then tail, made in a blink: each part is deflated on
    its own after a full flush (no reference back into the one before), so unit's deflated
    bytes are the same each time."""
    def deflated(b, mode):
        c = zlib.compressobj(6, zlib.DEFLATED, -15)
        return c.compress(b) + c.flush(mode)
    seg = deflated(unit, zlib.Z_FULL_FLUSH)
    crc = zlib.crc32(head)
    for _ in range(times):
        crc = zlib.crc32(unit, crc)
    crc = zlib.crc32(tail, crc)
    size = (len(head) + len(unit) * times + len(tail)) & 0xFFFFFFFF
    return (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + deflated(head, zlib.Z_FULL_FLUSH) +
            seg * times + deflated(tail, zlib.Z_FINISH) + struct.pack("<II", crc, size))


UP8 = "e/" * 8 + "/".join([".."] * 8)  # e -> . makes it climb 8 levels
DEEP = "/".join(["d" * 60] * 63)  # 63 levels, 3,842 bytes: a pax header names it


def deep_dir_flood():
    """100,000 entries (2.6 MB gzipped) that all name one directory 63 levels deep."""
    one = info(DEEP, tarfile.DIRTYPE, mode=0o755)[0].tobuf(format=tarfile.PAX_FORMAT)
    return gz_repeat(one * 100, 1000, bytes(1024))


def deep_dirs_distinct(n):
    """n directories side by side beneath DEEP, each named by its whole path (3.8 KB)."""
    z = zlib.compressobj(1, zlib.DEFLATED, 31)
    out = []
    # Each entry's bytes differ only in the pax record's last name (the ustar header holds
    # the first 100 bytes of the path only): one entry made, then renamed n times.
    tmpl = info(DEEP + "/x%06d" % 0, tarfile.DIRTYPE, mode=0o755)[0].tobuf(
        format=tarfile.PAX_FORMAT)
    at = tmpl.index(b"/x000000/\n")
    for i in range(n):
        b = b"%s/x%06d%s" % (tmpl[:at], i, tmpl[at + 8:])
        out.append(z.compress(b))
    out.append(z.compress(bytes(1024)))
    out.append(z.flush())
    return b"".join(out)


def symlinks_zip(links, files=()):
    """A zip of symlinks (name, target) and files (name, bytes). A reader of the stream sees
    no central directory, so each link's type is also in an "xl" extra field of its local
    header (version made by: Unix; external attributes: S_IFLNK), as libarchive writes it."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in files:
            z.writestr(name, data)
        for name, target in links:
            zi = zipfile.ZipInfo(name, (2023, 11, 14, 22, 13, 20))
            zi.create_system = 3
            zi.external_attr = 0o120777 << 16
            zi.extra = struct.pack("<HHBHI", 0x6C78, 7, 0x05, 3 << 8 | 20, zi.external_attr)
            z.writestr(zi, target)
    return buf.getvalue()


class Unseekable(io.RawIOBase):
    """A file a zip is written to as to a pipe: sizes go in data descriptors, after the
    bytes, so that a reader of the stream learns them only at the end."""

    def __init__(self, f):
        self.f = f

    def writable(self):
        return True

    def write(self, b):
        return self.f.write(b)


def bomb_zip(path, size):
    with open(path, "wb") as f, zipfile.ZipFile(Unseekable(f), "w", zipfile.ZIP_DEFLATED,
                                                compresslevel=1) as z:
        with z.open("zeros", "w", force_zip64=True) as w:
            chunk = bytes(1 << 20)
            for _ in range(size // len(chunk)):
                w.write(chunk)


def main(out):
    os.makedirs(out, exist_ok=True)
    good = [
        info("d", tarfile.DIRTYPE, mode=0o750),
        info("d/x.txt", data=b"x\n", mode=0o600),
        info("d/s", tarfile.SYMTYPE, linkname="x.txt"),
        info("d/h", tarfile.LNKTYPE, linkname="d/x.txt"),
    ]
    hostile = {
        "absolute.tar": [info("/etc/sbxd-pwned", data=b"pwned\n")],
        "dotdot.tar": [info("ok.txt", data=b"1"), info("../sbxd-pwned", data=b"pwned\n")],
        "dotdot_inner.tar": [info("a/../../sbxd-pwned", data=b"pwned\n")],
        "symlink_absolute.tar": [info("l", tarfile.SYMTYPE, linkname="/etc")],
        "symlink_leaves.tar": [info("a/l", tarfile.SYMTYPE, linkname="../../../../etc")],
        "symlink_then_file.tar": [
            info("sub", tarfile.DIRTYPE),
            info("l", tarfile.SYMTYPE, linkname="sub"),
            info("l/f", data=b"through a link\n"),
        ],
        "hardlink_outside.tar": [info("h", tarfile.LNKTYPE, linkname="/etc/passwd")],
        "hardlink_dotdot.tar": [info("h", tarfile.LNKTYPE, linkname="../outside")],
        "hardlink_missing.tar": [info("h", tarfile.LNKTYPE, linkname="nothing")],
        "device.tar": [info("ok.txt", data=b"1"), info("null", tarfile.CHRTYPE)],
        "fifo.tar": [info("p", tarfile.FIFOTYPE)],
        "setuid.tar": [info("su", data=b"#!/bin/sh\n", mode=0o4755)],
        "reserved_name.tar": [info(".sbxd-upload-0000000000000000", data=b"x")],
        # Links whose targets stay inside as text, but not once the links they go through are
        # followed (each climbs 8 levels, 3 of them below the destinations of the test).
        "symlink_dot_up.tar": [info("e", tarfile.SYMTYPE, linkname="."),
                               info("l", tarfile.SYMTYPE, linkname=UP8)],
        "symlink_up_then_dot.tar": [info("l", tarfile.SYMTYPE, linkname=UP8),
                                    info("e", tarfile.SYMTYPE, linkname=".")],
        "symlink_chain.tar": [info("a", tarfile.SYMTYPE, linkname="b"),
                              info("b", tarfile.SYMTYPE, linkname=".."),
                              info("l", tarfile.SYMTYPE, linkname="a/../..")],
        "symlink_loop.tar": [info("a", tarfile.SYMTYPE, linkname="b"),
                             info("b", tarfile.SYMTYPE, linkname="a")],
        "symlink_inner_link.tar": [info("sub", tarfile.DIRTYPE),
                                   info("sub/up", tarfile.SYMTYPE, linkname=".."),
                                   info("l", tarfile.SYMTYPE,
                                        linkname="sub/up/sub/up/sub/up/../../..")],
    }
    for name, members in hostile.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(tar_bytes(good + members))
    # Cut short in the middle of a file's bytes.
    whole = tar_bytes(good + [info("big", data=bytes(200000))])
    with open(os.path.join(out, "truncated.tar"), "wb") as f:
        f.write(whole[: len(whole) - 150000])
    with open(os.path.join(out, "garbage.tar"), "wb") as f:
        f.write(b"this is no archive at all\n" * 100)
    # 1 GiB of zeros in about a MiB.
    with open(os.path.join(out, "bomb.tar.gz"), "wb") as f:
        f.write(bomb_gz(1 << 30))
    bomb_zip(os.path.join(out, "bomb.zip"), 1 << 30)
    # For the limits of a daemon of their own: 20 entries; two files of 600 KB.
    with open(os.path.join(out, "many.tar"), "wb") as f:
        f.write(tar_bytes([info("m%02d" % i, data=b"m") for i in range(20)]))
    with open(os.path.join(out, "two_big.tar"), "wb") as f:
        f.write(tar_bytes([info("b1", data=bytes(600000)), info("b2", data=bytes(600000))]))
    # Merge and replace: files b (new content) and c, directory sub.
    with open(os.path.join(out, "update.tar"), "wb") as f:
        f.write(tar_bytes([info("b", data=b"new b\n"), info("c", data=b"c\n"),
                           info("sub", tarfile.DIRTYPE)]))
    # The same name twice (the later wins, as tar has it), and a directory then a file of its
    # name (refused: a directory is never replaced by a file within one archive).
    with open(os.path.join(out, "dup.tar"), "wb") as f:
        f.write(tar_bytes([info("a", data=b"1"), info("a", data=b"2"),
                           info("l", tarfile.SYMTYPE, linkname="a"), info("l", data=b"3")]))
    with open(os.path.join(out, "dir_then_file.tar"), "wb") as f:
        f.write(tar_bytes([info("d", tarfile.DIRTYPE), info("d", data=b"x")]))
    # A file where the workspace has a directory.
    with open(os.path.join(out, "file_over_dir.tar"), "wb") as f:
        f.write(tar_bytes([info("c", data=b"c\n"), info("keep", data=b"not a dir\n")]))
    # The same good tree as a zip.
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("zd/", b"")
        z.writestr("zd/é.txt", "été\n".encode())
        z.writestr("top.txt", b"top\n")
    with open(os.path.join(out, "good.zip"), "wb") as f:
        f.write(buf.getvalue())
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("../zip-pwned", b"pwned\n")
    with open(os.path.join(out, "zip_dotdot.zip"), "wb") as f:
        f.write(buf.getvalue())
    # The same links in zips, and "d -> ., l -> d/.." for the workspace root.
    with open(os.path.join(out, "symlink_dot_up.zip"), "wb") as f:
        f.write(symlinks_zip([("e", "."), ("l", UP8)]))
    with open(os.path.join(out, "symlink_chain.zip"), "wb") as f:
        f.write(symlinks_zip([("a", "b"), ("b", ".."), ("l", "a/../..")]))
    with open(os.path.join(out, "symlink_dot_parent.tar"), "wb") as f:
        f.write(tar_bytes([info("d", tarfile.SYMTYPE, linkname="."),
                           info("l", tarfile.SYMTYPE, linkname="d/..")]))
    with open(os.path.join(out, "symlink_dot_parent.zip"), "wb") as f:
        f.write(symlinks_zip([("d", "."), ("l", "d/..")]))
    # Through a link the workspace has (w -> .) when merged; through the destination's path.
    with open(os.path.join(out, "symlink_via_workspace.tar"), "wb") as f:
        f.write(tar_bytes([info("l", tarfile.SYMTYPE, linkname=UP8.replace("e/", "w/"))]))
    with open(os.path.join(out, "symlink_up3.tar"), "wb") as f:
        f.write(tar_bytes([info("l", tarfile.SYMTYPE, linkname="../../..")]))
    # Links that stay inside however they are followed: chains, "." and "..", dangling.
    benign = [("a", "sub"), ("b", "a"), ("c", "b/f"), ("up", "sub/.."), ("dot", "."),
              ("via", "dot/dot/sub/f"), ("back", "sub/../a/f"), ("sub/p", "../b"),
              ("dang", "nothing/x"), ("outer", "../x")]
    with open(os.path.join(out, "links_benign.tar"), "wb") as f:
        f.write(tar_bytes([info("sub", tarfile.DIRTYPE, mode=0o755), info("sub/f", data=b"f\n")] +
                          [info(n, tarfile.SYMTYPE, linkname=t) for n, t in benign]))
    with open(os.path.join(out, "links_benign.zip"), "wb") as f:
        f.write(symlinks_zip(benign, [("sub/f", b"f\n")]))
    # Directories: 100,000 entries naming one; 1,000 distinct ones, 3.8 KB of path each.
    with open(os.path.join(out, "deep_dir_flood.tar.gz"), "wb") as f:
        f.write(deep_dir_flood())
    with open(os.path.join(out, "deep_dirs_distinct.tar.gz"), "wb") as f:
        f.write(deep_dirs_distinct(1000))


if __name__ == "__main__":
    main(sys.argv[1])
