#!/usr/bin/env python3
"""Make an ImageNet-like set of JPEGs from the real photos in Debian's wallpaper packages.

ImageNet's training images are mostly ~500x375 (long side ~500, aspect around 4:3, some
portrait), baseline JPEG, quality ~90, 4:2:0 chroma subsampling. This script cuts that kind
of image from 40 named photos shipped by plasma-workspace-wallpapers (/usr/share/wallpapers) and
mate-backgrounds (/usr/share/backgrounds): random crops at random scales, some flipped,
resized so the long side is 400-500 px, saved at quality 90 / 4:2:0. The output is an
ImageFolder tree OUT/class_XX/NNNNN.jpg (class = source photo index mod --classes), so
`hotpath data pack OUT -o PREFIX` packs it directly. The same --seed gives the same files.

    python bench/make_imagenet_like.py --out /tmp/imagenet-like --count 2000 --seed 0
"""
import argparse
import glob
import os
import random
import sys

from PIL import Image

# The photos: every JPEG of at least MIN_SOURCE_SIDE of plasma-workspace-wallpapers (/usr/share/wallpapers)
# and mate-backgrounds (/usr/share/backgrounds), by name: a search of those folders would also cut
# from any other wallpaper package installed, and the benchmark's images would depend on the machine.
DEFAULT_PHOTOS = tuple("/usr/share/backgrounds/mate/" + p for p in (
    "abstract/Elephants.jpg", "abstract/Elephants_3840x2160.jpg", "abstract/Elephants_5640x3172.jpg",
    "desktop/GreenTraditional.jpg", "nature/Aqua.jpg", "nature/Blinds.jpg", "nature/Dune.jpg",
    "nature/FreshFlower.jpg", "nature/Garden.jpg", "nature/GreenMeadow.jpg", "nature/LadyBird.jpg",
    "nature/RainDrops.jpg", "nature/Storm.jpg", "nature/TwoWings.jpg", "nature/Wood.jpg", "nature/YellowFlower.jpg",
)) + tuple("/usr/share/wallpapers/" + p for p in (
    "Autumn/contents/images/2560x1600.jpg", "BytheWater/contents/images/2560x1600.jpg",
    "ColdRipple/contents/images/2560x1600.jpg", "ColorfulCups/contents/images/2560x1600.jpg",
    "DarkestHour/contents/images/2560x1600.jpg", "EveningGlow/contents/images/2560x1600.jpg",
    "FallenLeaf/contents/images/2560x1600.jpg", "Flow/contents/images/5120x2880.jpg",
    "Flow/contents/images/720x1440.jpg", "Flow/contents/images_dark/5120x2880.jpg",
    "Flow/contents/images_dark/720x1440.jpg", "Grey/contents/images/2560x1600.jpg",
    "Honeywave/contents/images/1080x1920.jpg", "Honeywave/contents/images/5120x2880.jpg",
    "Kite/contents/images/2560x1600.jpg", "OneStandsOut/contents/images/2560x1600.jpg",
    "PastelHills/contents/images/3200x2000.jpg", "Path/contents/images/2560x1600.jpg",
    "SafeLanding/contents/images/1622x2880.jpg", "SafeLanding/contents/images/5120x2880.jpg",
    "Shell/contents/images/5120x2880.jpg", "Shell/contents/images/720x1440.jpg",
    "Volna/contents/images/5120x2880.jpg", "summer_1am/contents/images/2560x1600.jpg",
))
# The packages' JPEGs are photographs; their PNGs are mostly rendered artwork (flat gradients
# that compress and decode unlike photos), so PNGs are used only with --include-png.
PHOTO_EXTENSIONS = (".jpg", ".jpeg")
MIN_SOURCE_SIDE = 700  # smaller files are previews/screenshots, not photos to cut from


def find_sources(roots, extensions):
    """Sorted photo paths under roots, without screenshots/previews and tiny images."""
    paths = []
    for root in roots:
        for path in glob.glob(os.path.join(root, "**", "*"), recursive=True):
            name = os.path.basename(path).lower()
            if not name.endswith(extensions) or "screenshot" in name or "preview" in name:
                continue
            if not os.path.isfile(path):
                continue
            try:
                with Image.open(path) as im:
                    if min(im.size) < MIN_SOURCE_SIDE:
                        continue
            except OSError:
                continue
            paths.append(path)
    return sorted(set(os.path.realpath(p) for p in paths))


def output_size(rng):
    """(w, h) like ImageNet's: long side 400-500, mostly ~4:3 landscape, some portrait/square."""
    long_side = rng.randint(400, 500)
    kind = rng.random()
    aspect = rng.uniform(1.25, 1.5) if kind < 0.85 else rng.uniform(1.0, 1.15)  # long/short
    short_side = max(1, round(long_side / aspect))
    if kind < 0.72 or (0.85 <= kind < 0.92):
        return long_side, short_side  # landscape
    return short_side, long_side  # portrait


def cut(photo, rng, size):
    """A random crop of `photo` with the output's aspect, at a random scale, maybe flipped."""
    out_w, out_h = size
    src_w, src_h = photo.size
    aspect = out_w / out_h
    # Largest crop with this aspect that fits, then a random fraction of it (area 10%..100%:
    # tighter crops of these smooth wallpaper photos would give even less detail than ImageNet's).
    max_w = min(src_w, src_h * aspect)
    scale = rng.uniform(0.1, 1.0) ** 0.5
    crop_w = max(out_w / 4, max_w * scale)
    crop_h = crop_w / aspect
    x = rng.uniform(0, src_w - crop_w)
    y = rng.uniform(0, src_h - crop_h)
    img = photo.resize(size, Image.Resampling.BICUBIC, box=(x, y, x + crop_w, y + crop_h),
                       reducing_gap=3.0)
    if rng.random() < 0.5:
        img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return img


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="output folder (ImageFolder layout)")
    parser.add_argument("--count", type=int, default=2000, help="number of JPEGs (default 2000)")
    parser.add_argument("--classes", type=int, default=10, help="class = source photo index mod this")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quality", type=int, default=90)
    parser.add_argument("--sources", nargs="*",
                        help="folders searched for photos (default: the named photos of the Debian wallpaper packages)")
    parser.add_argument("--include-png", action="store_true",
                        help="also cut from PNG files (artwork) under --sources")
    args = parser.parse_args()

    if args.sources is None:
        if args.include_png:
            sys.exit("make_imagenet_like: --include-png needs --sources (the default photos are named JPEGs)")
        missing = [p for p in DEFAULT_PHOTOS if not os.path.isfile(p)]
        if missing:
            sys.exit("make_imagenet_like: %s is missing (apt-get install plasma-workspace-wallpapers "
                     "mate-backgrounds, or scripts/setup)" % missing[0])
        sources = sorted(set(os.path.realpath(p) for p in DEFAULT_PHOTOS))
    else:
        extensions = PHOTO_EXTENSIONS + ((".png",) if args.include_png else ())
        sources = find_sources(args.sources, extensions)
        if not sources:
            sys.exit("make_imagenet_like: no photos found under %s" % ", ".join(args.sources))
    classes = min(args.classes, len(sources))
    for c in range(classes):
        os.makedirs(os.path.join(args.out, "class_%02d" % c), exist_ok=True)

    # Image i is cut from source i mod len(sources); each source is loaded once.
    total_bytes = 0
    for s, path in enumerate(sources):
        indices = range(s, args.count, len(sources))
        if not indices:
            continue
        with Image.open(path) as im:
            photo = im.convert("RGB")
        for i in indices:
            rng = random.Random(args.seed * 1_000_003 + i)
            img = cut(photo, rng, output_size(rng))
            dst = os.path.join(args.out, "class_%02d" % (s % classes), "%05d.jpg" % i)
            img.save(dst, "JPEG", quality=args.quality, subsampling=2, optimize=False, progressive=False)
            total_bytes += os.path.getsize(dst)
    print("wrote %d JPEGs (%.1f KiB average) from %d source photos into %d classes under %s"
          % (args.count, total_bytes / max(1, args.count) / 1024, len(sources), classes, args.out))


if __name__ == "__main__":
    main()
