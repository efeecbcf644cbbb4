// python/src/text_bindings.cpp — hotpath._C.Tokenizer: text::Tokenizer with a batch call shaped like a Hugging Face
// fast tokenizer's. python/hotpath/text.py turns HF's arguments (padding=True, truncation="only_second", ...) into
// the EncodeOptions fields this takes; here the texts are encoded with the GIL released and the columns come back
// as lists or as int64 tensors made without a Python list in between.
#include <ATen/ops/empty.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bindings.h"
#include "hotpath/core/error.h"
#include "hotpath/text/tokenizer.h"

namespace py = pybind11;

namespace hotpath::python {

std::vector<std::string_view> utf8_views(const py::list& list, const char* what) {
  std::vector<std::string_view> views;
  views.reserve(list.size());
  for (std::size_t i = 0; i < list.size(); ++i) {
    PyObject* item = list[i].ptr();
    HOTPATH_CHECK(PyUnicode_Check(item), what, "[", i, "]: expected a str, got ", Py_TYPE(item)->tp_name);
    Py_ssize_t size = 0;
    const char* data = PyUnicode_AsUTF8AndSize(item, &size);
    if (data == nullptr) throw py::error_already_set();  // a lone surrogate: UnicodeEncodeError names it
    views.emplace_back(data, static_cast<std::size_t>(size));
  }
  return views;
}

namespace {

using text::EncodeOptions;
using text::Encoding;
using text::Tokenizer;

text::TruncationStrategy parse_truncation(const std::string& name) {
  if (name == "longest_first") return text::TruncationStrategy::kLongestFirst;
  if (name == "only_first") return text::TruncationStrategy::kOnlyFirst;
  if (name == "only_second") return text::TruncationStrategy::kOnlySecond;
  HOTPATH_CHECK(false, "truncation: expected longest_first, only_first or only_second, got '", name, "'");
  return {};
}

text::Padding parse_padding(const std::string& name) {
  if (name == "do_not_pad") return text::Padding::kNone;
  if (name == "longest") return text::Padding::kLongest;
  if (name == "max_length") return text::Padding::kMaxLength;
  HOTPATH_CHECK(false, "padding: expected do_not_pad, longest or max_length, got '", name, "'");
  return {};
}

text::Side parse_side(const std::string& name, const char* what) {
  HOTPATH_CHECK(name == "right" || name == "left", what, ": expected right or left, got '", name, "'");
  return name == "left" ? text::Side::kLeft : text::Side::kRight;
}

// [rows, length] int64 from one int32 column of each encoding; every row must have the same length.
at::Tensor column_tensor(const std::vector<Encoding>& rows, std::vector<std::int32_t> Encoding::*column) {
  const std::size_t length = rows.empty() ? 0 : (rows.front().*column).size();
  for (std::size_t r = 0; r < rows.size(); ++r) {
    HOTPATH_CHECK((rows[r].*column).size() == length, "return_tensors='pt': row ", r, " has ", (rows[r].*column).size(),
                  " tokens and row 0 has ", length,
                  ": unable to create a tensor from rows of different lengths; pass padding=True (or "
                  "padding='max_length') and truncation=True");
  }
  at::Tensor out = at::empty({static_cast<std::int64_t>(rows.size()), static_cast<std::int64_t>(length)}, at::kLong);
  auto* dst = out.data_ptr<std::int64_t>();
  for (const Encoding& e : rows) {
    for (std::int32_t v : e.*column) *dst++ = v;
  }
  return out;
}

py::list column_lists(const std::vector<Encoding>& rows, std::vector<std::int32_t> Encoding::*column) {
  py::list out(rows.size());
  for (std::size_t r = 0; r < rows.size(); ++r) out[r] = py::cast(rows[r].*column);
  return out;
}

py::object offsets_column(const std::vector<Encoding>& rows, bool as_tensors) {
  if (as_tensors) {
    const std::size_t length = rows.empty() ? 0 : rows.front().offsets.size();
    at::Tensor out = at::empty({static_cast<std::int64_t>(rows.size()), static_cast<std::int64_t>(length), 2}, at::kLong);
    auto* dst = out.data_ptr<std::int64_t>();
    for (const Encoding& e : rows) {
      HOTPATH_ASSERT(e.offsets.size() == length);  // the ids column was checked first
      for (const text::Offset& o : e.offsets) {
        *dst++ = o.begin;
        *dst++ = o.end;
      }
    }
    return tensor_to_python(out);
  }
  py::list out(rows.size());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    py::list row(rows[r].offsets.size());
    for (std::size_t t = 0; t < rows[r].offsets.size(); ++t) {
      row[t] = py::make_tuple(rows[r].offsets[t].begin, rows[r].offsets[t].end);
    }
    out[r] = std::move(row);
  }
  return out;
}

// Encodes `texts` (and `pairs`, the second sequences, when given) and returns transformers' columns.
py::dict encode(const Tokenizer& tok, const py::list& texts, const std::optional<py::list>& pairs,
                const EncodeOptions& options, bool as_tensors) {
  const std::vector<std::string_view> firsts = utf8_views(texts, "text");
  std::vector<std::string_view> seconds;
  if (pairs) {
    seconds = utf8_views(*pairs, "text_pair");
    HOTPATH_CHECK(seconds.size() == firsts.size(), "text_pair: ", seconds.size(), " texts for ", firsts.size(),
                  " in text: expected one pair for each text");
  }
  text::FlatEncodings flat;
  {
    py::gil_scoped_release release;
    std::vector<Encoding> batch = pairs ? tok.encode_pair_batch(firsts, seconds, options) : tok.encode_batch(firsts, options);
    if (options.return_overflowing_tokens) {
      flat = text::flatten_overflowing(std::move(batch));
    } else {
      flat.encodings = std::move(batch);
    }
  }
  const std::vector<Encoding>& rows = flat.encodings;
  py::dict out;
  if (as_tensors) {
    out["input_ids"] = tensor_to_python(column_tensor(rows, &Encoding::ids));
    out["token_type_ids"] = tensor_to_python(column_tensor(rows, &Encoding::type_ids));
    out["attention_mask"] = tensor_to_python(column_tensor(rows, &Encoding::attention_mask));
    if (options.return_special_tokens_mask) {
      out["special_tokens_mask"] = tensor_to_python(column_tensor(rows, &Encoding::special_tokens_mask));
    }
  } else {
    out["input_ids"] = column_lists(rows, &Encoding::ids);
    out["token_type_ids"] = column_lists(rows, &Encoding::type_ids);
    out["attention_mask"] = column_lists(rows, &Encoding::attention_mask);
    if (options.return_special_tokens_mask) out["special_tokens_mask"] = column_lists(rows, &Encoding::special_tokens_mask);
  }
  if (options.return_offsets) out["offset_mapping"] = offsets_column(rows, as_tensors);
  if (options.return_overflowing_tokens) {
    if (as_tensors) {
      at::Tensor mapping = at::empty({static_cast<std::int64_t>(rows.size())}, at::kLong);
      for (std::size_t r = 0; r < rows.size(); ++r) {
        mapping.data_ptr<std::int64_t>()[r] = static_cast<std::int64_t>(flat.overflow_to_sample_mapping[r]);
      }
      out["overflow_to_sample_mapping"] = tensor_to_python(mapping);
    } else {
      out["overflow_to_sample_mapping"] = py::cast(flat.overflow_to_sample_mapping);
    }
  }
  return out;
}

}  // namespace

void bind_text(py::module_& m) {
  py::class_<Tokenizer>(m, "Tokenizer", "BERT WordPiece tokenizer (hotpath/text/tokenizer.h)")
      .def_static(
          "from_directory", [](const std::string& dir) { return Tokenizer::from_directory(dir); }, py::arg("dir"),
          "tokenizer.json if the directory has one, else vocab.txt (+ tokenizer_config.json)")
      .def(
          "encode",
          [](const Tokenizer& tok, const py::list& texts, const std::optional<py::list>& pairs, bool add_special_tokens,
             std::size_t max_length, const std::string& truncation, const std::string& truncation_side,
             std::size_t stride, const std::string& padding, std::size_t pad_length, std::size_t pad_to_multiple_of,
             const std::string& padding_side, bool return_offsets, bool return_special_tokens_mask,
             bool return_overflowing_tokens, bool as_tensors, unsigned threads) {
            EncodeOptions o;
            o.add_special_tokens = add_special_tokens;
            o.max_length = max_length;
            o.truncation = parse_truncation(truncation);
            o.truncation_side = parse_side(truncation_side, "truncation_side");
            o.stride = stride;
            o.padding = parse_padding(padding);
            o.pad_length = pad_length;
            o.pad_to_multiple_of = pad_to_multiple_of;
            o.padding_side = parse_side(padding_side, "padding_side");
            o.return_offsets = return_offsets;
            o.offset_unit = text::OffsetUnit::kChars;  // what HF's python API returns
            o.return_special_tokens_mask = return_special_tokens_mask;
            o.return_overflowing_tokens = return_overflowing_tokens;
            o.threads = threads;
            return encode(tok, texts, pairs, o, as_tensors);
          },
          py::arg("texts"), py::arg("pairs"), py::kw_only(), py::arg("add_special_tokens") = true,
          py::arg("max_length") = 0, py::arg("truncation") = "longest_first", py::arg("truncation_side") = "right",
          py::arg("stride") = 0, py::arg("padding") = "do_not_pad", py::arg("pad_length") = 0,
          py::arg("pad_to_multiple_of") = 0, py::arg("padding_side") = "right", py::arg("return_offsets") = false,
          py::arg("return_special_tokens_mask") = false, py::arg("return_overflowing_tokens") = false,
          py::arg("as_tensors") = false, py::arg("threads") = 1)
      .def("tokenize", &Tokenizer::tokenize, py::arg("text"))
      .def("token_to_id", &Tokenizer::token_to_id, py::arg("token"))
      .def("id_to_token", [](const Tokenizer& tok, std::int32_t id) { return std::string(tok.id_to_token(id)); },
           py::arg("id"))
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size)
      .def_property_readonly("model_max_length", &Tokenizer::model_max_length)
      .def_property_readonly("pad_id", &Tokenizer::pad_id)
      .def("num_special_tokens", &Tokenizer::num_special_tokens, py::arg("pair"));
}

}  // namespace hotpath::python
