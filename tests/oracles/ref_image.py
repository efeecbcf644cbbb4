#!/usr/bin/env python3
"""Reference outputs from PIL / torchvision for hotpath's image parity tests.

    ref_image.py photos OUTDIR            # test photos cut from 3 named Debian wallpapers; prints a JSON manifest
    ref_image.py pngs OUTDIR              # PNG variants (palette, tRNS, 16-bit, gray+alpha, interlaced)
    ref_image.py run JOBS.json            # runs a list of jobs (decode, resize, eval, rrc), see below

Jobs (one JSON object each; outputs are raw uint8 HWC files or JSON):
    {"op": "decode", "src": F, "out": RAW, "mode": "RGB"|"L"}           PIL open + convert
    {"op": "resize", "src": F, "out": RAW, "size": [w, h], "box": [x0, y0, x1, y1], "mode": "RGB"|"L"}
                                                                       PIL resize(BILINEAR, box)
    {"op": "crop_resize", "src": F, "out": RAW, "size": [w, h], "crop": [x0, y0, x1, y1]}
                                                                       PIL crop + resize (torchvision
                                                                       RandomResizedCrop on PIL images)
    {"op": "eval", "src": F, "out": RAW, "resize": 256, "crop": 224}   torchvision Resize + CenterCrop
    {"op": "rrc", "width": W, "height": H, "n": N, "seed": S, "out": JSON}
                                                                       RandomResizedCrop.get_params
    {"op": "erase", "width": W, "height": H, "n": N, "seed": S, "out": JSON}
                                                                       RandomErasing.get_params (value 0);
                                                                       h = w = 0 where no attempt fits
Python is only for tests: never on the product's runtime path.
"""
import json
import os
import struct
import sys
import zlib

import numpy as np
from PIL import Image

# Three different photos of Debian's plasma-workspace-wallpapers (scripts/setup), by name: a glob over
# /usr/share/wallpapers or /usr/share/backgrounds would pick other pictures wherever other wallpaper
# packages are installed.
SOURCE_PHOTOS = [
    "/usr/share/wallpapers/Autumn/contents/images/1280x1024.jpg",
    "/usr/share/wallpapers/EveningGlow/contents/images/1920x1200.jpg",
    "/usr/share/wallpapers/PastelHills/contents/images/1280x1024.jpg",
]


def source_photos():
    for path in SOURCE_PHOTOS:
        if not os.path.isfile(path):
            sys.exit(f"ref_image.py: {path} is missing: install Debian's plasma-workspace-wallpapers (scripts/setup)")
    return SOURCE_PHOTOS


def photos(outdir):
    a, b, c = (Image.open(p).convert("RGB") for p in source_photos())
    made = []

    def save(name, im, **kw):
        path = os.path.join(outdir, name)
        im.save(path, "JPEG", **kw)
        made.append({"name": name, "path": path, "width": im.width, "height": im.height})

    save("a_420.jpg", a.resize((640, 480), Image.LANCZOS), quality=90, subsampling=2)
    save("b_444.jpg", b.resize((640, 480), Image.LANCZOS), quality=90, subsampling=0)
    save("c_gray.jpg", c.resize((480, 640), Image.LANCZOS).convert("L"), quality=90)
    save("d_prog.jpg", a.resize((500, 375), Image.LANCZOS), quality=85, progressive=True)
    save("e_422_odd.jpg", b.resize((501, 333), Image.LANCZOS), quality=90, subsampling=1)
    save("f_cmyk.jpg", c.resize((300, 200), Image.LANCZOS).convert("CMYK"), quality=90)
    save("g_large.jpg", a.resize((1600, 1200), Image.LANCZOS), quality=90, subsampling=2)
    save("h_restart.jpg", c.resize((512, 384), Image.LANCZOS), quality=90, restart_marker_rows=2)
    print(json.dumps(made))


def png_chunk(kind, data):
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def adam7_passes(h, w):
    for y0, x0, dy, dx in [(0, 0, 8, 8), (0, 4, 8, 8), (4, 0, 8, 4), (0, 2, 4, 4), (2, 0, 4, 2), (0, 1, 2, 2), (1, 0, 2, 1)]:
        yield y0, x0, dy, dx


def write_png(path, samples, color_type, depth, interlace=False, palette=None, trns=None):
    """A minimal PNG writer (PIL cannot write 16-bit RGB or interlaced PNGs). samples: HxWxC array."""
    h, w = samples.shape[:2]
    dtype = ">u2" if depth == 16 else "u1"

    def raw_rows(img):
        out = b""
        for row in img:
            out += b"\x00" + np.ascontiguousarray(row, dtype=dtype).tobytes()
        return out

    if interlace:
        data = b""
        for y0, x0, dy, dx in adam7_passes(h, w):
            sub = samples[y0::dy, x0::dx]
            if sub.shape[0] and sub.shape[1]:
                data += raw_rows(sub)
    else:
        data = raw_rows(samples)
    png = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, int(interlace)))
    if palette is not None:
        png += png_chunk(b"PLTE", bytes(np.asarray(palette, dtype=np.uint8).ravel()))
    if trns is not None:
        png += png_chunk(b"tRNS", bytes(trns))
    png += png_chunk(b"IDAT", zlib.compress(data, 6)) + png_chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(png)


def pngs(outdir):
    src = Image.open(source_photos()[1]).convert("RGB").resize((97, 61), Image.LANCZOS)
    rgb = np.asarray(src)
    rng = np.random.default_rng(7)
    made = []

    def add(name, expect_mode="RGB", **kw):
        made.append({"name": name, "path": os.path.join(outdir, name), "expect": expect_mode, **kw})

    def pil_save(name, im, **kw):
        im.save(os.path.join(outdir, name), "PNG", **kw)
        add(name)

    pil_save("rgb.png", src)
    pil_save("rgba.png", Image.fromarray(np.dstack([rgb, rng.integers(0, 256, rgb.shape[:2], dtype=np.uint8)])))
    pil_save("gray.png", src.convert("L"))
    pil_save("gray_alpha.png", src.convert("LA"))
    pil_save("palette.png", src.quantize(64))
    pal = src.quantize(16)
    pal.info["transparency"] = 3
    pil_save("palette_trns.png", pal, transparency=3)
    pil_save("bilevel.png", src.convert("1"))
    rgb16 = rgb.astype(np.uint16) * 257 + rng.integers(0, 257, rgb.shape, dtype=np.uint16)
    write_png(os.path.join(outdir, "rgb16.png"), rgb16, 2, 16)
    add("rgb16.png", expect_mode="high_byte")
    gray16 = (np.asarray(src.convert("L")).astype(np.uint16) * 257)[..., None]
    write_png(os.path.join(outdir, "gray16.png"), gray16, 0, 16)
    add("gray16.png", expect_mode="high_byte")
    write_png(os.path.join(outdir, "interlaced.png"), rgb, 2, 8, interlace=True)
    add("interlaced.png")
    write_png(os.path.join(outdir, "interlaced16.png"), rgb16, 2, 16, interlace=True)
    add("interlaced16.png", expect_mode="high_byte")
    print(json.dumps(made))


def decode_png16_high_byte(path):
    """A 16-bit PNG written by write_png, reduced to its high bytes as RGB: hotpath's rule (PIL
    keeps the high byte of 16-bit RGB too, but saturates 16-bit gray on convert("RGB"))."""
    with open(path, "rb") as f:
        data = f.read()
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, color_type, _, _, interlace = ihdr
    channels = {0: 1, 2: 3}[color_type]
    assert depth == 16
    raw = zlib.decompress(idat)
    bpp = 2 * channels
    out = np.zeros((h, w, channels), dtype=np.uint16)
    passes = list(adam7_passes(h, w)) if interlace else [(0, 0, 1, 1)]
    pos = 0
    for y0, x0, dy, dx in passes:
        ys, xs = range(y0, h, dy), range(x0, w, dx)
        if not len(ys) or not len(xs):
            continue
        stride = len(xs) * bpp
        for y in ys:
            ftype, line = raw[pos], raw[pos + 1:pos + 1 + stride]
            pos += 1 + stride
            assert ftype == 0, "only filter type 0 is written by write_png"
            out[y, x0::dx] = np.frombuffer(line, dtype=">u2").reshape(len(xs), channels)
    rgb = (out >> 8).astype(np.uint8)
    return np.repeat(rgb, 3, axis=2) if channels == 1 else rgb


def job_decode(job):
    if job.get("mode") == "high_byte":
        arr = decode_png16_high_byte(job["src"])
    else:
        arr = np.asarray(Image.open(job["src"]).convert(job.get("mode", "RGB")))
    arr.tofile(job["out"])
    return {"width": arr.shape[1], "height": arr.shape[0]}


def job_resize(job):
    im = Image.open(job["src"]).convert(job.get("mode", "RGB"))
    out = im.resize(tuple(job["size"]), Image.BILINEAR, box=tuple(job["box"]))
    np.asarray(out).tofile(job["out"])
    return {"width": out.width, "height": out.height}


def job_crop_resize(job):
    im = Image.open(job["src"]).convert("RGB").crop(tuple(job["crop"]))
    out = im.resize(tuple(job["size"]), Image.BILINEAR)
    np.asarray(out).tofile(job["out"])
    return {"width": out.width, "height": out.height}


def job_eval(job):
    from torchvision import transforms

    t = transforms.Compose([transforms.Resize(job["resize"]), transforms.CenterCrop(job["crop"])])
    out = t(Image.open(job["src"]).convert("RGB"))
    np.asarray(out).tofile(job["out"])
    return {"width": out.width, "height": out.height}


def job_rrc(job):
    import torch
    from torchvision import transforms

    torch.manual_seed(job["seed"])
    img = Image.new("L", (job["width"], job["height"]))
    scale, ratio = job.get("scale", [0.08, 1.0]), job.get("ratio", [3.0 / 4.0, 4.0 / 3.0])
    rows = [transforms.RandomResizedCrop.get_params(img, scale, ratio) for _ in range(job["n"])]
    with open(job["out"], "w") as f:
        json.dump({"i": [r[0] for r in rows], "j": [r[1] for r in rows], "h": [r[2] for r in rows],
                   "w": [r[3] for r in rows]}, f)
    return {"n": len(rows)}


def job_erase(job):
    import torch
    from torchvision import transforms

    torch.manual_seed(job["seed"])
    img = torch.zeros(1, job["height"], job["width"])
    scale, ratio = job.get("scale", [0.02, 0.33]), job.get("ratio", [0.3, 3.3])
    rows = []
    for _ in range(job["n"]):
        i, j, h, w, v = transforms.RandomErasing.get_params(img, scale, ratio, value=[0.0])
        # No attempt fitted: torchvision returns the whole image itself, which forward leaves unchanged.
        rows.append((0, 0, 0, 0) if v is img else (i, j, h, w))
    with open(job["out"], "w") as f:
        json.dump({"i": [r[0] for r in rows], "j": [r[1] for r in rows], "h": [r[2] for r in rows],
                   "w": [r[3] for r in rows]}, f)
    return {"n": len(rows)}


def run(jobs_path):
    with open(jobs_path) as f:
        jobs = json.load(f)
    ops = {"decode": job_decode, "resize": job_resize, "crop_resize": job_crop_resize, "eval": job_eval, "rrc": job_rrc,
           "erase": job_erase}
    print(json.dumps([ops[job["op"]](job) for job in jobs]))


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("photos", "pngs", "run"):
        sys.exit(__doc__)
    {"photos": photos, "pngs": pngs, "run": run}[sys.argv[1]](sys.argv[2])


if __name__ == "__main__":
    main()
