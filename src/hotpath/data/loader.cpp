#include "hotpath/data/loader.h"

#include <ATen/Context.h>
#include <ATen/Functions.h>

#include <algorithm>
#include <cmath>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <string_view>
#include <thread>

#include "hotpath/core/error.h"
#include "hotpath/core/random.h"
#include "hotpath/formats/tar.h"
#include "cuda/device_stage.h"

namespace hotpath::data {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

constexpr std::size_t kMaxBadMessages = 1000;
constexpr std::uint64_t kShardStream = 0x5348415244ULL;   // "SHARD": shard-order stream id
constexpr std::uint64_t kBufferStream = 0x42554646ULL;    // "BUFF": shuffle-buffer stream id
constexpr std::uint64_t kSampleStream = 0x53414d50ULL;    // "SAMP": per-sample augmentation

const formats::SampleMember* find_image(const formats::TarSample& sample) {
  for (std::string_view ext : {"jpg", "jpeg", "png"}) {
    if (const formats::SampleMember* m = sample.find(ext)) return m;
  }
  return nullptr;
}

// A sample the planner accepted: its shard stays mapped while any batch refers to it.
struct SampleRef {
  std::shared_ptr<const formats::ShardReader> shard;
  const formats::TarSample* sample = nullptr;
  const formats::SampleMember* image = nullptr;
  std::int64_t label = 0;
  std::int64_t position = 0;  // in the epoch's global batch order: the key of the sample's random draws
};

// Where a sample's image lives, for messages: "shard:offset:member".
std::string image_where(const SampleRef& ref) {
  return ref.shard->path() + ":" + std::to_string(ref.image->header_offset) + ":" + ref.image->name;
}

// Parses a WebDataset .cls member: a decimal integer, surrounding whitespace allowed.
std::optional<std::int64_t> parse_label(std::span<const std::byte> bytes) {
  std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return std::nullopt;
  const auto last = text.find_last_not_of(" \t\r\n");
  text = text.substr(first, last - first + 1);
  std::int64_t value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

// The deterministic stream of samples of one epoch on one rank: shard order, then a shuffle
// buffer. Reports structurally bad samples to `bad` ("shard:offset:member: reason").
class EpochPlan {
 public:
  EpochPlan(const LoaderOptions& options, std::int64_t epoch)
      : options_(options),
        rng_(Rng::for_stream(options.seed, {kBufferStream, static_cast<std::uint64_t>(epoch)})) {
    std::vector<std::string> order = options.shards;
    if (options.shuffle) {
      Rng shard_rng = Rng::for_stream(options.seed, {kShardStream, static_cast<std::uint64_t>(epoch)});
      for (std::size_t i = order.size(); i > 1; --i) {  // Fisher-Yates, identical on every rank
        std::swap(order[i - 1], order[static_cast<std::size_t>(shard_rng.uniform_int(0, static_cast<std::int64_t>(i) - 1))]);
      }
    }
    shards_ = options.split_batches ? order : shards_for_rank(order, options.rank, options.world_size);
  }

  // The next sample, or nullopt at the end of the epoch.
  std::optional<SampleRef> next(std::vector<std::string>& bad) {
    const std::size_t capacity = options_.shuffle ? std::max<std::size_t>(options_.shuffle_buffer, 1) : 1;
    while (buffer_.size() < capacity) {
      std::optional<SampleRef> s = pull(bad);
      if (!s) break;
      buffer_.push_back(std::move(*s));
    }
    if (buffer_.empty()) return std::nullopt;
    std::size_t pick = 0;
    if (options_.shuffle) {
      pick = static_cast<std::size_t>(rng_.uniform_int(0, static_cast<std::int64_t>(buffer_.size()) - 1));
    }
    std::swap(buffer_[pick], buffer_.back());
    SampleRef out = std::move(buffer_.back());
    buffer_.pop_back();
    return out;
  }

 private:
  // Next valid sample in shard order, opening shards as needed.
  std::optional<SampleRef> pull(std::vector<std::string>& bad) {
    while (true) {
      if (shard_ && next_sample_ < shard_->samples().size()) {
        const formats::TarSample& sample = shard_->samples()[next_sample_++];
        if (auto ref = accept(sample, bad)) return ref;
        continue;
      }
      if (next_shard_ >= shards_.size()) return std::nullopt;
      shard_ = std::make_shared<const formats::ShardReader>(shards_[next_shard_++]);
      next_sample_ = 0;
      for (const formats::BadRecord& r : shard_->bad()) bad.push_back(r.to_string());
    }
  }

  std::optional<SampleRef> accept(const formats::TarSample& sample, std::vector<std::string>& bad) const {
    const std::string where = shard_->path() + ":" + std::to_string(sample.offset) + ":" + sample.key;
    const formats::SampleMember* image = find_image(sample);
    if (image == nullptr) {
      bad.push_back(where + ": no image member (.jpg, .jpeg or .png)");
      return std::nullopt;
    }
    const formats::SampleMember* cls = sample.find("cls");
    if (cls == nullptr) {
      bad.push_back(where + ": missing .cls label");
      return std::nullopt;
    }
    const auto label = parse_label(shard_->bytes(*cls));
    if (!label) {
      bad.push_back(shard_->path() + ":" + std::to_string(cls->header_offset) + ":" + cls->name +
                    ": label is not a decimal integer");
      return std::nullopt;
    }
    // Labels are sample data: one outside [0, num_classes) (-100 included, which the loss would silently
    // ignore) is a bad sample like any other, skipped and counted against max_bad_samples.
    if (*label < 0 || (options_.num_classes > 0 && *label >= options_.num_classes)) {
      bad.push_back(shard_->path() + ":" + std::to_string(cls->header_offset) + ":" + cls->name + ": label " +
                    std::to_string(*label) + " outside [0, " +
                    (options_.num_classes > 0 ? std::to_string(options_.num_classes) : std::string("inf")) + ")");
      return std::nullopt;
    }
    return SampleRef{shard_, &sample, image, *label};
  }

  const LoaderOptions& options_;
  Rng rng_;
  std::vector<std::string> shards_;
  std::size_t next_shard_ = 0;
  std::shared_ptr<const formats::ShardReader> shard_;
  std::size_t next_sample_ = 0;
  std::vector<SampleRef> buffer_;
};

// kReady → kStaging → kStaged only in the CUDA mode (the stage thread finishes the batch on the device).
enum class SlotState { kFree, kPlanning, kFilling, kReady, kStaging, kStaged, kHeld };

struct Slot {
  SlotState state = SlotState::kFree;
  std::int64_t epoch = 0;
  std::int64_t index = 0;
  at::Tensor images;   // [B, C, H, W] or [B, H, W, C] storage
  at::Tensor labels;   // [B] int64
  std::vector<SampleRef> samples;
  std::vector<std::string> errors;  // per row: empty = ok
  std::vector<std::string> plan_bad;  // samples the planner skipped while filling this batch
  int remaining = 0;
  // CUDA mode.
  int cpu_rows = 0;                     // decode nvjpeg: rows [0, cpu_rows) are decoded by the decode threads
  std::vector<SampleAugment> augments;  // decode nvjpeg: per row, drawn by the decode threads
  at::Tensor device_images;             // the finished batch (good rows only)
  at::Tensor device_labels;
  std::optional<c10::Event> done;       // recorded on the stage's stream after the batch
  std::vector<std::string> stage_bad;   // every row left out of the batch, with its reason
};

struct Task {
  std::size_t slot = 0;
  int row = 0;
};

}  // namespace

std::vector<std::string> shards_for_rank(const std::vector<std::string>& shards, int rank, int world_size) {
  HOTPATH_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "loader: rank ", rank,
                " is not in [0, world_size=", world_size, ")");
  std::vector<std::string> mine;
  for (std::size_t i = static_cast<std::size_t>(rank); i < shards.size(); i += static_cast<std::size_t>(world_size)) {
    mine.push_back(shards[i]);
  }
  return mine;
}

std::int64_t count_samples(const LoaderOptions& options) {
  LoaderOptions plain = options;
  plain.shuffle = false;  // order does not change the count; no shuffle buffer to fill
  EpochPlan plan(plain, 0);
  std::vector<std::string> bad;
  std::int64_t n = 0;
  while (plan.next(bad)) ++n;
  return n;
}

SampleAugment draw_sample_augment(const LoaderOptions& o, int width, int height, std::int64_t epoch,
                                  std::int64_t position) {
  Rng rng = Rng::for_stream(o.seed, {kSampleStream, static_cast<std::uint64_t>(epoch), static_cast<std::uint64_t>(position)});
  SampleAugment a;
  a.box = Box{0, 0, static_cast<double>(width), static_cast<double>(height)};
  if (o.crop == CropMode::kRandomResizedCrop) {
    a.box = random_resized_crop_box(width, height, o.rrc, rng);
  } else if (o.crop == CropMode::kResizeCenterCrop) {
    a.box = resize_center_crop_box(width, height, o.resize_shorter, o.size);
  }
  a.flip = o.flip_probability > 0 && rng.bernoulli(o.flip_probability);
  if (o.translate > 0) {
    // RandomCrop(size, padding=t) on the resized image: top-left of the crop in the padded image.
    const auto top = rng.uniform_int(0, 2 * o.translate);
    const auto left = rng.uniform_int(0, 2 * o.translate);
    a.shift_x = static_cast<int>(o.translate - left);
    a.shift_y = static_cast<int>(o.translate - top);
  }
  if (o.erasing.probability > 0) a.erase = random_erasing_rect(o.size, o.size, o.erasing, rng);
  return a;
}

struct Loader::State {
  explicit State(LoaderOptions opts) : options(std::move(opts)) {}

  LoaderOptions options;
  std::int64_t row_elements = 0;  // elements of one sample in the images tensor
  // Samples planned per batch: all ranks' with split_batches (this rank keeps its rows), else this rank's.
  [[nodiscard]] std::int64_t global_batch() const {
    return std::int64_t{options.batch_size} * (options.split_batches ? options.world_size : 1);
  }
  bool pinned = false;
  // What the decode threads write: options.format, or uint8 HWC (normalised on the device) in the CUDA mode.
  StoreFormat host_format{};
  bool nvjpeg = false;                 // the split mode: the decode threads take a batch's first rows, nvJPEG the rest
  std::unique_ptr<DeviceStage> stage;  // CUDA mode
  // decode nvjpeg: how many rows of a batch the decode threads decode. Adapted by the stage thread (nvjpeg_cpu_share
  // < 0): up when it finds the next batch already decoded (it is the slower side), down when it has to wait for
  // the decode threads. Read by the planner.
  double cpu_rows_target = 0;
  std::int64_t cpu_decoded = 0;        // decode nvjpeg: images the decode threads decoded (the rest: nvJPEG)

  std::mutex mu;
  std::condition_variable work_cv;   // workers: tasks available / stop
  std::condition_variable plan_cv;   // planner: a slot became free / reset / stop
  std::condition_variable done_cv;   // consumer and seek: a slot is ready / work drained
  bool stop = false;

  std::vector<Slot> slots;
  std::deque<Task> tasks;
  int active_tasks = 0;
  bool planner_busy = false;
  bool stage_busy = false;
  std::uint64_t stage_seq = 0;  // the next slot (in ring order) the stage thread finishes
  std::uint64_t generation = 0;

  // Planner side (the EpochPlan itself is touched only by the planner thread).
  bool reset_pending = false;
  BatchPosition reset_to{};
  bool planner_active = false;
  std::int64_t plan_epoch = 0;
  std::int64_t plan_batch = 0;
  std::uint64_t plan_seq = 0;
  std::unique_ptr<EpochPlan> plan;
  std::map<std::int64_t, std::int64_t> epoch_batches;  // epoch -> number of batches (once known)
  // Skipped samples are counted when the consumer reaches them (with their batch, or at the end
  // of their epoch), so counts never include what the planner merely looked at ahead of time.
  std::map<std::int64_t, std::vector<std::string>> epoch_tail_bad;
  std::exception_ptr planner_error;

  // Consumer side.
  BatchPosition position{};
  std::uint64_t consume_seq = 0;
  std::deque<std::size_t> held;  // slots handed out, released two calls later

  LoaderStats stats{};
  std::int64_t bad_total = 0;
  std::vector<std::string> bad_messages;

  std::thread planner_thread;
  std::vector<std::thread> workers;
  std::thread stage_thread;

  void record_bad(std::vector<std::string>& found) {  // requires mu
    bad_total += static_cast<std::int64_t>(found.size());
    stats.bad_samples = bad_total;
    for (auto& m : found) {
      if (bad_messages.size() < kMaxBadMessages) bad_messages.push_back(std::move(m));
    }
    found.clear();
  }

  void check_bad_budget() const {  // requires mu
    HOTPATH_CHECK(options.max_bad_samples < 0 || bad_total <= options.max_bad_samples, "loader: ", bad_total,
                  " bad samples skipped, more than the budget of ", options.max_bad_samples,
                  " (max_bad_samples); last: ", bad_messages.empty() ? std::string("?") : bad_messages.back());
  }

  // Reuse the slot's memory unless the consumer still holds a reference to it.
  void allocate_if_held(Slot& slot) const {
    const auto& o = options;
    const auto in_use = [](const at::Tensor& t) { return !t.defined() || t.storage().use_count() > 1; };
    if (in_use(slot.images)) {
      at::ScalarType dtype = at::kFloat;
      if (host_format.type == PixelType::kUInt8) dtype = at::kByte;
      if (host_format.type == PixelType::kBFloat16) dtype = at::kBFloat16;
      const std::vector<std::int64_t> shape =
          host_format.layout == PixelLayout::kCHW
              ? std::vector<std::int64_t>{o.batch_size, o.channels, o.size, o.size}
              : std::vector<std::int64_t>{o.batch_size, o.size, o.size, o.channels};
      slot.images = at::empty(shape, at::TensorOptions().dtype(dtype).pinned_memory(pinned));
    }
    if (in_use(slot.labels)) {
      slot.labels = at::empty({o.batch_size}, at::TensorOptions().dtype(at::kLong).pinned_memory(pinned));
    }
  }

  // Moves the rows that decoded up over the ones that did not (keeping order) in the host batch; the reasons
  // of the others go to `bad`. Returns the number of good rows.
  int compact_rows(Slot& slot, std::vector<std::string>& bad) const {
    int good = 0;
    const int rows = static_cast<int>(slot.samples.size());
    const std::size_t row_bytes =
        slot.images.defined() ? static_cast<std::size_t>(row_elements) * slot.images.element_size() : 0;
    auto* images = slot.images.defined() ? static_cast<std::uint8_t*>(slot.images.data_ptr()) : nullptr;
    auto* labels = slot.labels.data_ptr<std::int64_t>();
    for (int r = 0; r < rows; ++r) {
      if (!slot.errors[static_cast<std::size_t>(r)].empty()) {
        bad.push_back(std::move(slot.errors[static_cast<std::size_t>(r)]));
        continue;
      }
      if (good != r) {
        if (images != nullptr) {
          std::memmove(images + static_cast<std::size_t>(good) * row_bytes,
                       images + static_cast<std::size_t>(r) * row_bytes, row_bytes);
        }
        labels[good] = labels[r];
        if (!slot.augments.empty()) slot.augments[static_cast<std::size_t>(good)] = slot.augments[static_cast<std::size_t>(r)];
        slot.samples[static_cast<std::size_t>(good)] = slot.samples[static_cast<std::size_t>(r)];
      }
      ++good;
    }
    return good;
  }

  void planner_loop();
  std::vector<SampleRef> pick_batch(Slot& slot, std::vector<std::string>& bad, bool& epoch_end);
  void worker_loop();
  void stage_loop();
  void finish_on_device(Slot& slot, std::vector<std::string>& bad);
  void process(Slot& slot, int row, std::uint8_t* scratch_hwc, DecodeScratch& scratch, LoaderStats& local);
};

// The planner's work between its locks: the next global batch of the plan (fewer at the epoch's end; none when
// drop_last drops a short one), its positions, this rank's rows, and the slot made ready for them (its labels).
std::vector<SampleRef> Loader::State::pick_batch(Slot& slot, std::vector<std::string>& bad, bool& epoch_end) {
  std::vector<SampleRef> picked;
  picked.reserve(static_cast<std::size_t>(global_batch()));
  while (static_cast<std::int64_t>(picked.size()) < global_batch()) {
    auto s = plan->next(bad);
    if (!s) {
      epoch_end = true;
      break;
    }
    picked.push_back(std::move(*s));
  }
  if (epoch_end && (options.drop_last || picked.empty())) picked.clear();
  for (std::size_t i = 0; i < picked.size(); ++i) {
    picked[i].position = plan_batch * global_batch() + static_cast<std::int64_t>(i);
  }
  if (options.split_batches && !picked.empty()) {  // this rank's rows of the global batch
    const auto first = picked.begin() + static_cast<std::ptrdiff_t>(options.rank) * options.batch_size;
    picked = std::vector<SampleRef>(std::make_move_iterator(first),
                                    std::make_move_iterator(first + options.batch_size));
  }
  if (!picked.empty()) {
    // CUDA mode: the stage thread does not wait for its stream; the copies that read this slot's pinned memory
    // (pixels, labels) may still be queued. Wait for them here, at the refill, which comes prefetch + 2 batches
    // later: by then they have long run, and the stage thread never waited on the GPU.
    if (slot.done) {
      slot.done->synchronize();
      slot.done.reset();
    }
    allocate_if_held(slot);
    auto* labels = slot.labels.data_ptr<std::int64_t>();
    for (std::size_t i = 0; i < picked.size(); ++i) labels[i] = picked[i].label;
  }
  return picked;
}

void Loader::State::planner_loop() {
  std::unique_lock lk(mu);
  while (true) {
    plan_cv.wait(lk, [&] {
      return stop || reset_pending ||
             (planner_active && slots[plan_seq % slots.size()].state == SlotState::kFree);
    });
    if (stop) return;
    const std::uint64_t gen = generation;
    planner_busy = true;
    if (reset_pending) {
      reset_pending = false;
      const BatchPosition to = reset_to;
      lk.unlock();
      std::vector<std::string> bad;
      std::unique_ptr<EpochPlan> fresh;
      std::exception_ptr error;
      const auto t0 = Clock::now();
      try {
        fresh = std::make_unique<EpochPlan>(options, to.epoch);
        const std::int64_t skip = to.batch * global_batch();  // replay the plan, decode nothing
        for (std::int64_t i = 0; i < skip && fresh->next(bad); ++i) {
        }
      } catch (...) {
        error = std::current_exception();
      }
      lk.lock();
      planner_busy = false;
      stats.plan_seconds += seconds_since(t0);
      done_cv.notify_all();
      if (gen != generation) continue;
      record_bad(bad);
      if (error) {
        planner_error = error;
        planner_active = false;
        done_cv.notify_all();
        continue;
      }
      plan = std::move(fresh);
      plan_epoch = to.epoch;
      plan_batch = to.batch;
      plan_seq = 0;
      planner_active = true;
      continue;
    }

    const std::size_t slot_id = plan_seq % slots.size();
    Slot& slot = slots[slot_id];
    slot.state = SlotState::kPlanning;
    lk.unlock();

    const auto t0 = Clock::now();
    std::vector<std::string> bad;
    std::vector<SampleRef> picked;
    std::exception_ptr error;
    bool epoch_end = false;
    try {
      picked = pick_batch(slot, bad, epoch_end);
    } catch (...) {
      error = std::current_exception();
    }
    const double plan_time = seconds_since(t0);

    lk.lock();
    planner_busy = false;
    stats.plan_seconds += plan_time;
    done_cv.notify_all();
    if (gen != generation) {
      slot.state = SlotState::kFree;
      continue;
    }
    if (error) {
      record_bad(bad);
      slot.state = SlotState::kFree;
      planner_error = error;
      planner_active = false;
      done_cv.notify_all();
      continue;
    }
    if (!picked.empty()) {
      slot.epoch = plan_epoch;
      slot.index = plan_batch;
      slot.samples = std::move(picked);
      slot.plan_bad = std::move(bad);
      slot.errors.assign(slot.samples.size(), std::string());
      if (nvjpeg) {
        slot.augments.assign(slot.samples.size(), SampleAugment{});
        slot.cpu_rows = std::clamp(static_cast<int>(std::lround(cpu_rows_target)), 0, static_cast<int>(slot.samples.size()));
      }
      slot.remaining = static_cast<int>(slot.samples.size());
      slot.state = SlotState::kFilling;
      for (int r = 0; r < slot.remaining; ++r) tasks.push_back({slot_id, r});
      ++plan_seq;
      ++plan_batch;
      work_cv.notify_all();
    } else {
      slot.state = SlotState::kFree;
    }
    if (!bad.empty()) {
      auto& tail = epoch_tail_bad[plan_epoch];
      tail.insert(tail.end(), std::make_move_iterator(bad.begin()), std::make_move_iterator(bad.end()));
    }
    if (epoch_end) {
      epoch_batches[plan_epoch] = plan_batch;
      done_cv.notify_all();
      if (plan_batch == 0) {  // an empty epoch: stop here, the consumer reports it
        planner_active = false;
        continue;
      }
      ++plan_epoch;  // persistent across epochs: keep the ring full over the boundary
      plan_batch = 0;
      lk.unlock();
      std::unique_ptr<EpochPlan> fresh;
      try {
        fresh = std::make_unique<EpochPlan>(options, plan_epoch);
      } catch (...) {
        error = std::current_exception();
      }
      lk.lock();
      if (gen != generation) continue;
      if (error) {
        planner_error = error;
        planner_active = false;
        done_cv.notify_all();
        continue;
      }
      plan = std::move(fresh);
    }
  }
}

namespace {

// Moves the packed HWC image by (dx, dy) pixels in place, filling what is uncovered with 0.
void shift_image(std::uint8_t* hwc, int width, int height, int channels, int dx, int dy) {
  if (dx == 0 && dy == 0) return;
  const std::size_t row_bytes = static_cast<std::size_t>(width) * static_cast<std::size_t>(channels);
  const auto row = [&](int y) { return hwc + static_cast<std::size_t>(y) * row_bytes; };
  const int abs_dx = std::min(std::abs(dx), width);
  const std::size_t move = static_cast<std::size_t>(width - abs_dx) * static_cast<std::size_t>(channels);
  const std::size_t fill = row_bytes - move;
  // Walk rows so a source row is read before it is overwritten.
  for (int i = 0; i < height; ++i) {
    const int y = dy > 0 ? height - 1 - i : i;
    const int src_y = y - dy;
    std::uint8_t* dst = row(y);
    if (src_y < 0 || src_y >= height) {
      std::memset(dst, 0, row_bytes);
      continue;
    }
    const std::uint8_t* src = row(src_y);
    if (dx >= 0) {
      std::memmove(dst + fill, src, move);
      std::memset(dst, 0, fill);
    } else {
      std::memmove(dst, src + fill, move);
      std::memset(dst + move, 0, fill);
    }
  }
}

}  // namespace

void Loader::State::process(Slot& slot, int row, std::uint8_t* hwc, DecodeScratch& scratch, LoaderStats& local) {
  const auto& o = options;
  const SampleRef& ref = slot.samples[static_cast<std::size_t>(row)];
  const auto t0 = Clock::now();
  const std::span<const std::byte> bytes = ref.shard->bytes(*ref.image);
  // decode nvjpeg: a truncated JPEG is rejected here, as the CPU decoder would (nvJPEG may not notice).
  const bool to_nvjpeg = nvjpeg && row >= slot.cpu_rows;
  const ImageInfo info = to_nvjpeg ? probe_image_complete(bytes, o.limits) : probe_image(bytes, o.limits);
  const SampleAugment a = draw_sample_augment(o, info.width, info.height, slot.epoch, ref.position);
  if (to_nvjpeg) {  // the stage thread decodes the whole image on the GPU and applies `a` there
    slot.augments[static_cast<std::size_t>(row)] = a;
    local.decode_seconds += seconds_since(t0);
    return;
  }
  DecodeResizeOptions decode{.channels = o.channels, .allow_dct_scaling = o.allow_dct_scaling, .limits = o.limits};
  decode_box_resized(bytes, a.box, o.size, o.size, decode, hwc, scratch);
  shift_image(hwc, o.size, o.size, o.channels, a.shift_x, a.shift_y);
  const auto t1 = Clock::now();
  const std::size_t elem = slot.images.element_size();
  auto* dst = static_cast<std::uint8_t*>(slot.images.data_ptr()) +
              static_cast<std::size_t>(row) * static_cast<std::size_t>(row_elements) * elem;
  store_sample(hwc, o.size, o.size, o.channels, a.flip, o.normalization, host_format, dst);
  erase_sample(a.erase, o.size, o.size, o.channels, o.normalization, host_format, dst);
  local.decode_seconds += std::chrono::duration<double>(t1 - t0).count();
  local.store_seconds += seconds_since(t1);
}

void Loader::State::worker_loop() {
  std::vector<std::uint8_t> hwc(static_cast<std::size_t>(options.size) * options.size * options.channels);
  DecodeScratch scratch;
  std::unique_lock lk(mu);
  while (true) {
    work_cv.wait(lk, [&] { return stop || !tasks.empty(); });
    if (stop) return;
    const Task task = tasks.front();
    tasks.pop_front();
    ++active_tasks;
    Slot& slot = slots[task.slot];
    lk.unlock();

    LoaderStats local{};
    std::string error;
    try {
      process(slot, task.row, hwc.data(), scratch, local);
    } catch (const std::exception& e) {
      const SampleRef& ref = slot.samples[static_cast<std::size_t>(task.row)];
      error = image_where(ref) + ": " + e.what();
    }

    lk.lock();
    --active_tasks;
    stats.decode_seconds += local.decode_seconds;
    stats.store_seconds += local.store_seconds;
    if (!error.empty()) slot.errors[static_cast<std::size_t>(task.row)] = std::move(error);
    // Wake the consumer only for a finished batch, and seek() only once the work has drained.
    const bool batch_done = --slot.remaining == 0;
    if (batch_done) slot.state = SlotState::kReady;
    if (batch_done || active_tasks == 0) done_cv.notify_all();
  }
}


// The stage thread's work on one batch (CUDA mode); the slot is kStaging, so nothing else touches it.
void Loader::State::finish_on_device(Slot& slot, std::vector<std::string>& bad) {
  // decode nvjpeg: the rows the decode threads decoded are a prefix of the batch; compaction keeps the order, so
  // the good ones stay a prefix, of this length.
  int good_cpu = 0;
  for (int r = 0; r < std::min<int>(slot.cpu_rows, static_cast<int>(slot.samples.size())); ++r) {
    if (slot.errors[static_cast<std::size_t>(r)].empty()) ++good_cpu;
  }
  int good = compact_rows(slot, bad);
  at::Tensor images;
  if (nvjpeg && good > 0) {
    std::vector<std::span<const std::byte>> encoded;
    for (int r = good_cpu; r < good; ++r) {
      const SampleRef& ref = slot.samples[static_cast<std::size_t>(r)];
      encoded.push_back(ref.shard->bytes(*ref.image));
    }
    std::vector<std::string> errors;  // per nvJPEG row (row good_cpu + i)
    const at::Tensor host = good_cpu > 0 ? slot.images.narrow(0, 0, good_cpu) : at::Tensor();
    images = stage->decode(host, encoded,
                           std::span(slot.augments).subspan(static_cast<std::size_t>(good_cpu),
                                                            static_cast<std::size_t>(good - good_cpu)),
                           errors);
    // Rows nvJPEG and the CPU decoders both rejected: out of the batch (decode() already left them out).
    auto* labels = slot.labels.data_ptr<std::int64_t>();
    int kept = good_cpu;
    for (int r = good_cpu; r < good; ++r) {
      if (const std::string& why = errors[static_cast<std::size_t>(r - good_cpu)]; !why.empty()) {
        bad.push_back(image_where(slot.samples[static_cast<std::size_t>(r)]) + ": " + why);
        continue;
      }
      slot.samples[static_cast<std::size_t>(kept)] = slot.samples[static_cast<std::size_t>(r)];
      labels[kept++] = labels[r];
    }
    good = kept;
    slot.cpu_rows = good_cpu;  // what the decode threads delivered, for the count
  } else if (good > 0) {
    images = stage->from_host(slot.images.narrow(0, 0, good));
  }
  slot.device_images = good > 0 ? images : at::Tensor();
  slot.device_labels = good > 0 ? stage->labels(slot.labels.narrow(0, 0, good)) : at::Tensor();
  slot.done = stage->finish();  // the slot's host memory is refilled only once this event has completed (planner)
}

void Loader::State::stage_loop() {
  std::unique_lock lk(mu);
  const bool adapt = nvjpeg && options.nvjpeg_cpu_share < 0;
  const double step = std::max(1.0, options.batch_size / 32.0);
  while (true) {
    const auto ready = [&] { return slots[stage_seq % slots.size()].state == SlotState::kReady; };
    // The split follows whichever side is slower: a batch already decoded when this thread comes for it means
    // nvJPEG (this thread) is the bottleneck, so the decode threads take more rows; waiting for it, fewer.
    if (adapt && !stop && planner_active) {
      cpu_rows_target = std::clamp(cpu_rows_target + (ready() ? step : -step), 0.0, static_cast<double>(options.batch_size));
    }
    done_cv.wait(lk, [&] { return stop || ready(); });
    if (stop) return;
    const std::uint64_t gen = generation;
    Slot& slot = slots[stage_seq % slots.size()];
    slot.state = SlotState::kStaging;
    stage_busy = true;
    lk.unlock();

    const auto t0 = Clock::now();
    std::vector<std::string> bad = std::move(slot.plan_bad);
    std::exception_ptr error;
    try {
      finish_on_device(slot, bad);
    } catch (...) {
      error = std::current_exception();
    }

    lk.lock();
    stage_busy = false;
    stats.device_seconds += seconds_since(t0);
    stats.device_decode_seconds = stage->decode_seconds();
    done_cv.notify_all();
    if (gen != generation) continue;  // seek() frees every slot once this thread is idle
    if (error) {  // a device failure (out of memory, a CUDA error): the consumer rethrows it
      planner_error = error;
      slot.state = SlotState::kFree;
      continue;
    }
    slot.stage_bad = std::move(bad);
    cpu_decoded += slot.cpu_rows;
    slot.state = SlotState::kStaged;
    ++stage_seq;
  }
}

Loader::Loader(LoaderOptions options) : state_(std::make_unique<State>(std::move(options))) {
  State& s = *state_;
  const auto& o = s.options;
  HOTPATH_CHECK(!o.shards.empty(), "loader: no shards given");
  HOTPATH_CHECK(o.batch_size >= 1, "loader: batch_size must be >= 1, got ", o.batch_size);
  HOTPATH_CHECK(o.workers >= 1, "loader: workers must be >= 1, got ", o.workers);
  HOTPATH_CHECK(o.prefetch >= 1, "loader: prefetch must be >= 1, got ", o.prefetch);
  HOTPATH_CHECK(o.size >= 1 && o.size <= 8192, "loader: size must be in [1, 8192], got ", o.size);
  HOTPATH_CHECK(o.channels == 1 || o.channels == 3, "loader: channels must be 1 or 3, got ", o.channels);
  HOTPATH_CHECK(o.translate >= 0 && o.translate < o.size, "loader: translate must be in [0, size), got ",
                o.translate);
  HOTPATH_CHECK(o.flip_probability >= 0 && o.flip_probability <= 1, "loader: flip probability must be in [0, 1], got ",
                o.flip_probability);
  HOTPATH_CHECK(o.erasing.probability >= 0 && o.erasing.probability <= 1,
                "loader: random erasing probability must be in [0, 1], got ", o.erasing.probability);
  shards_for_rank(o.shards, o.rank, o.world_size);  // validates rank/world_size
  HOTPATH_CHECK(!o.split_batches || o.drop_last, "loader: split_batches needs drop_last (every rank its full share)");
  HOTPATH_CHECK(o.decode != DecodeBackend::kNvjpeg || o.device.is_cuda(),
                "loader: decode nvjpeg needs a CUDA device (LoaderOptions::device), got ", o.device.str());
  HOTPATH_CHECK(o.device.is_cpu() || o.device.is_cuda(), "loader: device must be cpu or cuda, got ", o.device.str());
  HOTPATH_CHECK(!(o.nvjpeg_cpu_share > 1) && !std::isnan(o.nvjpeg_cpu_share),
                "loader: nvjpeg_cpu_share must be in [0, 1] (or < 0: adapted), got ", o.nvjpeg_cpu_share);
  s.row_elements = static_cast<std::int64_t>(o.size) * o.size * o.channels;
  s.pinned = o.pin_memory && at::globalContext().hasCUDA();
  s.host_format = o.format;
  if (o.device.is_cuda()) {
    s.stage = std::make_unique<DeviceStage>(o);  // one line when there is no CUDA device or no nvJPEG
    s.host_format = {.type = PixelType::kUInt8, .layout = PixelLayout::kHWC, .normalize = false};
    s.nvjpeg = o.decode == DecodeBackend::kNvjpeg;
    s.pinned = true;
    // Adapted: start from an even split; fixed: that share of every batch.
    s.cpu_rows_target = o.batch_size * (o.nvjpeg_cpu_share < 0 ? 0.5 : o.nvjpeg_cpu_share);
  }
  // prefetch batches being prepared + the batch the trainer is using + the one it just dropped.
  s.slots.resize(static_cast<std::size_t>(o.prefetch) + 2);
  s.planner_thread = std::thread([&s] { s.planner_loop(); });
  for (int i = 0; i < o.workers; ++i) s.workers.emplace_back([&s] { s.worker_loop(); });
  if (s.stage) s.stage_thread = std::thread([&s] { s.stage_loop(); });
  seek({0, 0});
}

Loader::~Loader() {
  {
    std::lock_guard lk(state_->mu);
    state_->stop = true;
  }
  state_->work_cv.notify_all();
  state_->plan_cv.notify_all();
  state_->done_cv.notify_all();
  state_->planner_thread.join();
  for (auto& w : state_->workers) w.join();
  if (state_->stage_thread.joinable()) state_->stage_thread.join();
}

void Loader::seek(BatchPosition position) {
  HOTPATH_CHECK(position.epoch >= 0 && position.batch >= 0, "loader: cannot seek to epoch ", position.epoch,
                " batch ", position.batch);
  State& s = *state_;
  std::unique_lock lk(s.mu);
  ++s.generation;
  s.tasks.clear();
  s.planner_active = false;
  s.done_cv.wait(lk, [&] { return s.active_tasks == 0 && !s.planner_busy && !s.stage_busy; });
  for (Slot& slot : s.slots) {
    slot.state = SlotState::kFree;
    slot.samples.clear();
    slot.device_images = at::Tensor();
    slot.device_labels = at::Tensor();
  }
  s.stage_seq = 0;
  s.held.clear();
  s.epoch_batches.clear();
  s.epoch_tail_bad.clear();
  s.planner_error = nullptr;
  s.position = position;
  s.consume_seq = 0;
  s.reset_pending = true;
  s.reset_to = position;
  s.plan_cv.notify_all();
}

std::optional<Batch> Loader::next() {
  State& s = *state_;
  const auto& o = s.options;
  std::unique_lock lk(s.mu);
  // The batch handed out two calls ago is certainly no longer being read by the trainer.
  while (s.held.size() >= 2) {
    s.slots[s.held.front()].state = SlotState::kFree;
    s.slots[s.held.front()].samples.clear();
    s.held.pop_front();
    s.plan_cv.notify_all();
  }
  while (true) {
    const auto t0 = Clock::now();
    Slot* slot = nullptr;
    s.done_cv.wait(lk, [&] {
      if (s.planner_error) return true;
      if (auto it = s.epoch_batches.find(s.position.epoch); it != s.epoch_batches.end() && s.position.batch >= it->second) {
        return true;
      }
      Slot& candidate = s.slots[s.consume_seq % s.slots.size()];
      const SlotState finished = s.stage ? SlotState::kStaged : SlotState::kReady;
      if (candidate.state == finished && candidate.epoch == s.position.epoch &&
          candidate.index == s.position.batch) {
        slot = &candidate;
        return true;
      }
      return false;
    });
    s.stats.wait_seconds += seconds_since(t0);
    if (s.planner_error) std::rethrow_exception(s.planner_error);
    if (slot == nullptr) {  // end of this epoch
      const std::int64_t count = s.epoch_batches[s.position.epoch];
      if (auto tail = s.epoch_tail_bad.find(s.position.epoch); tail != s.epoch_tail_bad.end()) {
        s.record_bad(tail->second);
        s.epoch_tail_bad.erase(tail);
      }
      s.check_bad_budget();
      HOTPATH_CHECK(count > 0, "loader: epoch ", s.position.epoch, " has no complete batch of ", o.batch_size,
                    " samples on rank ", o.rank, " of ", o.world_size,
                    " (shards empty, too few samples, or every sample bad; ", s.bad_total, " bad so far)");
      s.epoch_batches.erase(s.epoch_batches.begin(), s.epoch_batches.upper_bound(s.position.epoch));
      s.position = {s.position.epoch + 1, 0};
      return std::nullopt;
    }

    Batch batch;
    batch.epoch = slot->epoch;
    batch.index = slot->index;
    int good = 0;
    if (s.stage) {  // finished on the device by the stage thread
      s.record_bad(slot->stage_bad);
      s.check_bad_budget();
      batch.images = std::move(slot->device_images);
      batch.labels = std::move(slot->device_labels);
      good = batch.labels.defined() ? static_cast<int>(batch.labels.size(0)) : 0;
      if (good > 0) DeviceStage::hand_over(*slot->done, {batch.images, batch.labels});
    } else {
      // Compact rows that failed to decode (rare): move later good rows up, keep order.
      std::vector<std::string> bad = std::move(slot->plan_bad);
      good = s.compact_rows(*slot, bad);
      s.record_bad(bad);
      s.check_bad_budget();
      batch.images = slot->images.narrow(0, 0, good);
      if (o.format.layout == PixelLayout::kHWC) batch.images = batch.images.permute({0, 3, 1, 2});
      batch.labels = slot->labels.narrow(0, 0, good);
    }
    batch.positions = at::empty({good}, at::kLong);
    auto* positions = batch.positions.data_ptr<std::int64_t>();
    for (int r = 0; r < good; ++r) positions[r] = slot->samples[static_cast<std::size_t>(r)].position;
    slot->state = SlotState::kHeld;
    s.held.push_back(s.consume_seq % s.slots.size());
    ++s.consume_seq;
    s.position.batch += 1;
    s.stats.samples += good;
    s.stats.batches += 1;
    if (good == 0) continue;  // every sample of this batch was bad: go on to the next one
    return batch;
  }
}

BatchPosition Loader::position() const {
  std::lock_guard lk(state_->mu);
  return state_->position;
}

LoaderStats Loader::stats() const {
  std::lock_guard lk(state_->mu);
  return state_->stats;
}

std::vector<std::string> Loader::bad_samples() const {
  std::lock_guard lk(state_->mu);
  return state_->bad_messages;
}

const LoaderOptions& Loader::options() const { return state_->options; }

std::string Loader::describe() const {
  const State& s = *state_;
  const std::string threads = std::to_string(s.options.workers) + " decode thread(s)";
  if (s.nvjpeg) {
    std::lock_guard lk(state_->mu);
    const std::string share = s.options.nvjpeg_cpu_share < 0
                                  ? "adapted, now " + std::to_string(static_cast<int>(std::lround(s.cpu_rows_target)))
                                  : "fixed " + std::to_string(s.options.nvjpeg_cpu_share);
    return s.stage->describe() + ", " + threads + " (libjpeg-turbo) for each batch's first rows (" + share + " of " +
           std::to_string(s.options.batch_size) + "; " + std::to_string(s.cpu_decoded) + " images so far)";
  }
  if (s.stage) return s.stage->describe() + ", " + threads;
  return "decode cpu (libjpeg-turbo, " + threads + "), augment cpu";
}

Loader::EpochRange Loader::epoch(std::int64_t epoch) {
  const BatchPosition p = position();
  if (p.epoch != epoch) seek({epoch, 0});
  return EpochRange(this);
}

}  // namespace hotpath::data
