# The real photos of the int8 accuracy tests, each a named file scripts/setup installs (hermetic: no listing of a
# system folder). Sourced by tests/cli/*_efficientnet_test.sh. Three sets that share no source photo:
#   calibration_photos  the int8 export's calibration views (mate-backgrounds photos)
#   qat_photos          quantization-aware training's images: the calibration photos, the mate-backgrounds images
#                       no measured set uses, and scikit-learn's two sample photos (in the venv, where
#                       sentence-transformers brings scikit-learn: pass the venv's python)
#   measured_photos     what agreement is measured on: darknet's JPEGs and plasma-workspace-wallpapers photos
# Usage: source photos.sh PYTHON; check_photos  (dies naming a missing file)
mate=/usr/share/backgrounds/mate
wall=/usr/share/wallpapers
calibration_photos=(
  "$mate/abstract/Elephants.jpg" "$mate/desktop/GreenTraditional.jpg" "$mate/nature/Aqua.jpg"
  "$mate/nature/Blinds.jpg" "$mate/nature/Dune.jpg" "$mate/nature/FreshFlower.jpg" "$mate/nature/Garden.jpg"
  "$mate/nature/GreenMeadow.jpg" "$mate/nature/LadyBird.jpg" "$mate/nature/RainDrops.jpg"
  "$mate/nature/Storm.jpg" "$mate/nature/TwoWings.jpg" "$mate/nature/Wood.jpg" "$mate/nature/YellowFlower.jpg"
)
sklearn_images=$("${1:?photos.sh: pass the venv python}" -c 'import os, sklearn; print(os.path.join(os.path.dirname(sklearn.__file__), "datasets", "images"))')
qat_photos=("${calibration_photos[@]}" "$mate/desktop/MATE-Stripes-Dark.png" "$mate/desktop/Ubuntu-Mate-Dark-no-logo.png"
  "$mate/desktop/Ubuntu-Mate-Radioactive-no-logo.png" "$sklearn_images/china.jpg" "$sklearn_images/flower.jpg")
measured_photos=()
for name in dog eagle giraffe horses kite person scream; do measured_photos+=("/usr/share/darknet/data/$name.jpg"); done
for name in Autumn BytheWater ColdRipple ColorfulCups DarkestHour EveningGlow FallenLeaf Grey Kite OneStandsOut \
  Path summer_1am; do
  measured_photos+=("$wall/$name/contents/images/2560x1600.jpg")
done
measured_photos+=("$wall/Flow/contents/images/5120x2880.jpg" "$wall/Honeywave/contents/images/5120x2880.jpg"
  "$wall/PastelHills/contents/images/3200x2000.jpg" "$wall/SafeLanding/contents/images/5120x2880.jpg"
  "$wall/Shell/contents/images/5120x2880.jpg" "$wall/Volna/contents/images/5120x2880.jpg")

check_photos() {
  local photo
  for photo in "${qat_photos[@]}" "${measured_photos[@]}"; do
    [ -f "$photo" ] || die "$photo is missing: install darknet, mate-backgrounds and plasma-workspace-wallpapers (scripts/setup)"
  done
}
