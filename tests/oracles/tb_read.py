"""Reference side of hotpath's TensorBoard parity test: read a log directory with TensorBoard's own loader.

  tb_read.py LOG_DIR   # prints JSON {"scalars": {tag: [[step, value, wall_time], ...]},
                       #              "text": {tag: [[step, text], ...]}}

EventAccumulator is what the `tensorboard` server uses to load event files, so a file it reads
back with the same steps and values is a file TensorBoard shows. size_guidance 0 keeps every event
(its default samples scalars down to 10,000 and tensors to 10).
"""
import json
import sys

from tensorboard.backend.event_processing import event_accumulator


def main():
    log_dir = sys.argv[1]
    acc = event_accumulator.EventAccumulator(
        log_dir, size_guidance={event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0})
    acc.Reload()
    tags = acc.Tags()
    scalars = {tag: [[e.step, e.value, e.wall_time] for e in acc.Scalars(tag)] for tag in tags["scalars"]}
    text = {}
    for tag in tags["tensors"]:
        if acc.SummaryMetadata(tag).plugin_data.plugin_name != "text":
            continue
        text[tag] = [[e.step, e.tensor_proto.string_val[0].decode("utf-8")] for e in acc.Tensors(tag)]
    json.dump({"scalars": scalars, "text": text}, sys.stdout)


if __name__ == "__main__":
    main()
