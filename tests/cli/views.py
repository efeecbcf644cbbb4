"""Views of photos for the int8 accuracy tests: views.py OUT [--whole SIZE] PHOTO...

Default: six views of each photo (whole, centre 60 %, four 60 % corners), long side <= 512, JPEG quality 95, named
NNN_V.jpg (NNN the photo's place on the command line). --whole SIZE: one view per photo, the whole image with its
long side <= SIZE (quantization-aware training crops it at random)."""
import os
import sys

from PIL import Image

args = sys.argv[1:]
out = args.pop(0)
whole = None
if args and args[0] == "--whole":
    whole = int(args[1])
    args = args[2:]
os.makedirs(out, exist_ok=True)
for i, path in enumerate(args):
    with Image.open(path) as im:
        im = im.convert("RGB")
    w, h = im.size
    if whole is not None:
        im.thumbnail((whole, whole), Image.Resampling.BICUBIC)
        im.save(os.path.join(out, "%03d.jpg" % i), quality=95)
        continue
    cw, ch = int(w * 0.6), int(h * 0.6)
    boxes = [(0, 0, w, h), ((w - cw) // 2, (h - ch) // 2, (w + cw) // 2, (h + ch) // 2),
             (0, 0, cw, ch), (w - cw, 0, w, ch), (0, h - ch, cw, h), (w - cw, h - ch, w, h)]
    for j, box in enumerate(boxes):
        view = im.crop(box)
        view.thumbnail((512, 512), Image.Resampling.BICUBIC)
        view.save(os.path.join(out, "%03d_%d.jpg" % (i, j)), quality=95)
