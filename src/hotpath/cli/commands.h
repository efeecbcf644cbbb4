// Subcommand registration for the `hotpath` executable: one function per file in src/hotpath/cli/.
// Each adds its subcommand (options + callback) to the parent it is given. A callback reports
// failure by throwing hotpath::Error; main() turns that into one line on stderr and exit code 1.
#pragma once

namespace CLI {
class App;
}

namespace hotpath::cli {

void add_data_pack(CLI::App& data);
void add_data_inspect(CLI::App& data);
void add_data_bench(CLI::App& data);
void add_data_text(CLI::App& data);  // `data pack-text`, `data text-stats`
void add_train(CLI::App& app);
void add_eval(CLI::App& app);
void add_predict(CLI::App& app);
void add_export(CLI::App& app);  // `export`: a model package (or ONNX file) for the engine and the server
void add_bench(CLI::App& app);  // `bench train`, and `bench text` through add_bench_text
void add_bench_text(CLI::App& bench);
void add_bench_data(CLI::App& bench);  // `bench data`: `data bench` under the bench command
void add_bench_infer(CLI::App& bench);  // `bench infer`: a model package vs PyTorch / ONNX Runtime / OpenVINO
void add_bench_serve(CLI::App& bench);  // `bench serve`: hotpath serve under load vs the engine offline
void add_tokenize(CLI::App& app);
void add_embed(CLI::App& app);
void add_serve(CLI::App& app);  // `serve`: model packages over HTTP (KServe v2 / Triton protocol)

}  // namespace hotpath::cli
