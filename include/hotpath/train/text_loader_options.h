// hotpath/train/text_loader_options.h — the recipe → text loader mapping (data.kind: text), the text
// counterpart of train_loader_options (task.h). One implementation: TextTask builds its loaders with it,
// and hotpath.text.Loader (python/src/) calls it, so the same recipe gives the same batches.
#pragma once

#include "hotpath/text/text_loader.h"
#include "hotpath/train/recipe.h"

namespace hotpath::train {

// The text loader's settings for a recipe: data.train's shards with shuffling when `training`, else
// data.eval's in order; tokenizer (data.tokenizer, else model.pretrained), max_length, workers,
// micro-batches of train.batch_size / train.accum_steps, max_tokens, pad_to_multiple_of, bucketing,
// train.seed; rank `rank` of `world_size` (every world_size-th sample of the epoch's permutation).
// Errors name the recipe and the key (no pattern, nothing matches, a shard not on disk).
text::TextLoaderOptions text_loader_options(const Recipe& recipe, bool training, int rank = 0, int world_size = 1);

}  // namespace hotpath::train
