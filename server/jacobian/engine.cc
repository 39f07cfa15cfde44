#include "server/jacobian/engine.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <optional>
#include <string>

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "server/host/memory.h"
#include "server/jacobian/allocator.h"
#include "server/jacobian/batch_plan.h"
#include "server/jacobian/probes.h"
#include "server/jacobian/summaries.h"
#include "server/limits/limits.h"
#include "server/status/error.h"

namespace posbias::jacobian {
namespace {

using models::DecoderModel;

// One input sequence: its embeddings [1, L, d] and, for token inputs, the ids as drawn or given
// (random inputs draw L + 1, so the log-probability output has a next token at every target).
// One input sequence. Drawn up front for every sample (the draws follow one seeded stream), but
// its embeddings [1, L, d] (float64, CPU) only when it is measured (WithEmbeddings), so that a
// measurement of many samples at long L holds one sample's embeddings at a time.
struct Sample {
  torch::Tensor embeds;              // Set by WithEmbeddings.
  std::optional<at::Generator> gaussian;  // Gaussian inputs: the stream where the sample's draw starts.
  std::vector<int64_t> tokens;
  int64_t gaussian_next_token = -1;
  // The token after position t (1-based), scored by the log-probability output.
  int64_t NextToken(int64_t target) const {
    return tokens.empty() ? gaussian_next_token : tokens[target];
  }
};

// Free memory of the device in bytes, or -1 when it cannot be read. CUDA: cudaMemGetInfo from the
// CUDA runtime that LibTorch already loaded (looked up at run time, so the engine compiles against
// CPU-only LibTorch too). CPU: the host's available memory.
int64_t FreeMemoryBytes(const torch::Device& device) {
  if (device.is_cuda()) {
    using SetDevice = int (*)(int);
    using MemGetInfo = int (*)(size_t*, size_t*);
    for (const char* name : {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"}) {
      void* library = dlopen(name, RTLD_NOW | RTLD_NOLOAD);
      if (library == nullptr) library = dlopen(name, RTLD_NOW);
      if (library == nullptr) continue;
      auto set_device = reinterpret_cast<SetDevice>(dlsym(library, "cudaSetDevice"));
      auto get_info = reinterpret_cast<MemGetInfo>(dlsym(library, "cudaMemGetInfo"));
      size_t free_bytes = 0, total_bytes = 0;
      if (set_device && get_info && set_device(device.index() < 0 ? 0 : device.index()) == 0 &&
          get_info(&free_bytes, &total_bytes) == 0) {
        return static_cast<int64_t>(free_bytes);
      }
    }
    return -1;
  }
  const int64_t available = host::ReadHostMemory().available_bytes;
  return available > 0 ? available : -1;
}

bool IsOutOfMemory(const c10::Error& error) {
  const std::string message = error.what_without_backtrace();
  return message.find("out of memory") != std::string::npos ||
         message.find("can't allocate") != std::string::npos ||
         message.find("not enough memory") != std::string::npos;
}

// Every decoder family brings its own reverse pass (models::InputReversePass); TorchScript and
// the Cesaro routing model go through autograd.
bool HasOwnReversePass(const DecoderModel& model) { return models::HasOwnReversePass(model.config().family); }

// Norms accumulate in float32, or float64 for a float64 measurement.
torch::Dtype NormDtype(torch::Dtype dtype) { return dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32; }

int64_t OutputWidth(const DecoderModel& model, Output output) {
  return jobs::IsScalarOutput(output) ? 1 : model.config().hidden_size;
}

// The model's own pass serves every output: the loss gradient's cotangents enter every position
// of the top layer (InputReversePass::SequenceInputGradients).
bool UsesModelPass(const DecoderModel& model, const MeasureOptions& options) {
  return options.reverse_pass != MeasureOptions::ReversePass::kAutograd && HasOwnReversePass(model);
}

// The next-token loss over a sample, summed over positions (nats): -sum_t log p(x_{t+1} | x_<=t)
// from final hidden states [B, L, d] and the sample's ids x_1..x_{L+1}; [B, 1]. The log-softmax
// in float64 for a float64 measurement, else float32.
torch::Tensor NextTokenLoss(DecoderModel& model, const torch::Tensor& hidden, const std::vector<int64_t>& tokens) {
  const int64_t length = hidden.size(1);
  auto next = torch::tensor(std::vector<int64_t>(tokens.begin() + 1, tokens.begin() + 1 + length), torch::kLong)
                  .to(hidden.device());
  auto log_probs = torch::log_softmax(model.Logits(hidden).to(NormDtype(hidden.scalar_type())), -1);  // [B, L, V].
  auto picked = log_probs.gather(2, next.view({1, length, 1}).expand({hidden.size(0), length, 1}));
  return -picked.sum({1, 2}).unsqueeze(1);
}

// The loss's cotangent on the final hidden states [T, d] of one sequence: d(-sum_t log p(x_{t+1}
// | h_t)) / d h_t, through the output head only (autograd over the head, which every family
// defines: tied or untied, scaled or soft-capped logits), kLossHeadChunkElements logits at a time.
torch::Tensor LossHeadGradient(DecoderModel& model, const torch::Tensor& hidden, const std::vector<int64_t>& tokens) {
  torch::AutoGradMode enable_grad(true);
  const int64_t length = hidden.size(0);
  const int64_t chunk = std::clamp<int64_t>(kLossHeadChunkElements / std::max<int64_t>(1, model.config().vocab_size), 1,
                                            length);
  auto out = torch::empty_like(hidden);
  for (int64_t i = 0; i < length; i += chunk) {
    const int64_t n = std::min(chunk, length - i);
    auto h = hidden.narrow(0, i, n).detach().unsqueeze(0).set_requires_grad(true);
    const std::vector<int64_t> ids(tokens.begin() + i, tokens.begin() + i + n + 1);  // x_{i+1}..x_{i+n+1}.
    out.narrow(0, i, n).copy_(torch::autograd::grad({NextTokenLoss(model, h, ids).sum()}, {h})[0][0]);
  }
  return out;
}

std::vector<Sample> DrawSamples(DecoderModel& model, const MeasureOptions& options) {
  torch::NoGradGuard no_grad;
  const auto& config = model.config();
  std::vector<Sample> samples(options.samples);
  if (options.input == InputKind::kRandomTokens) {
    auto ids = DrawTokenIds(options.draw_vocab_size > 0 ? options.draw_vocab_size : config.vocab_size, options);
    for (int64_t s = 0; s < options.samples; ++s) samples[s].tokens = std::move(ids[s]);
    return samples;
  }
  auto generator = at::detail::createCPUGenerator(options.seed);
  for (int64_t s = 0; s < options.samples; ++s) {
    Sample& sample = samples[s];
    if (options.input == InputKind::kGaussianEmbeddings) {
      sample.gaussian = generator.clone();
      (void)torch::randn({1, options.length, config.hidden_size}, generator);  // Drawn again by WithEmbeddings.
      sample.gaussian_next_token = torch::randint(config.vocab_size, {1}, generator).item<int64_t>();
    } else {
      sample.tokens = options.tokens[s];
    }
  }
  return samples;
}

// The sample with its input embeddings (float64 on the CPU; cast per pass).
Sample WithEmbeddings(const Sample& drawn, DecoderModel& model, const MeasureOptions& options,
                      const torch::Device& device) {
  torch::NoGradGuard no_grad;
  Sample sample = drawn;
  if (sample.gaussian) {
    auto generator = sample.gaussian->clone();
    sample.embeds = (torch::randn({1, options.length, model.config().hidden_size}, generator) * options.embedding_std)
                        .to(torch::kFloat64);
    return sample;
  }
  const std::vector<int64_t> prefix(sample.tokens.begin(), sample.tokens.begin() + options.length);
  auto ids = torch::tensor(prefix, torch::kLong).unsqueeze(0).to(device);
  sample.embeds = model.Embed(ids).to(torch::kCPU, torch::kFloat64);
  return sample;
}

// Outputs y [rows, width] at the target position, one per requested output (layers for a sweep).
// `value_only`: the attention probabilities detached (Pathway::kValueOnly).
std::vector<torch::Tensor> Outputs(DecoderModel& model, const torch::Tensor& e, const MeasureOptions& options,
                                   int64_t target, const Sample& sample, bool checkpoint, bool value_only,
                                   torch::Tensor* target_hidden = nullptr) {
  models::ForwardOptions forward;
  forward.record_layers = options.output == Output::kLayerSweep;
  forward.checkpoint_layers = checkpoint;
  forward.detach_attention_probabilities = value_only;
  auto out = model.Forward(e, forward);
  if (target_hidden != nullptr) *target_hidden = out.hidden.select(1, target - 1)[0].detach();
  std::vector<torch::Tensor> ys;
  if (options.output == Output::kLayerSweep) {
    for (auto& layer : out.layers) ys.push_back(layer.select(1, target - 1));
  } else if (options.output == Output::kLossGradient) {
    ys.push_back(NextTokenLoss(model, out.hidden, sample.tokens));
  } else if (options.output == Output::kLogProb) {
    auto logits = model.Logits(out.hidden.select(1, target - 1).unsqueeze(1)).squeeze(1);
    auto log_probs = torch::log_softmax(logits.to(torch::kFloat32), -1);
    ys.push_back(log_probs.select(1, sample.NextToken(target)).unsqueeze(1));
  } else {
    ys.push_back(out.hidden.select(1, target - 1));
  }
  return ys;
}

// One sample's per-output, per-position results: the squared norms (sums over the one-hot rows
// for exact, the probe means for Hutchinson) and, for Hutchinson, the variance of that mean.
struct SampleSums {
  std::vector<torch::Tensor> sq_norm;    // [L] float64 per output.
  std::vector<torch::Tensor> probe_var;  // [L] float64 per output (Hutchinson).
  // Both pathways at once (compare_pathways): for the same cotangent rows, the value pathway's
  // ||g_value||^2 and the score pathway's ||g_full - g_value||^2 (the same mean as sq_norm's).
  std::vector<torch::Tensor> value_sq_norm;
  std::vector<torch::Tensor> score_sq_norm;
  std::optional<jobs::NextTokenScore> next_token;  // score_next_token.
};

// How the model scores token `next` from the final hidden state at the target ([d]): its
// log-probability, and how many ids score strictly above it or equal to it (float64 logits).
jobs::NextTokenScore ScoreNextToken(DecoderModel& model, const torch::Tensor& hidden, int64_t next) {
  torch::NoGradGuard no_grad;
  auto logits = model.Logits(hidden.reshape({1, 1, -1})).reshape({-1}).to(torch::kCPU, torch::kDouble);
  auto log_probs = torch::log_softmax(logits, 0);
  jobs::NextTokenScore score;
  score.log_prob = log_probs[next].item<double>();
  score.rank = (log_probs > score.log_prob).sum().item<int64_t>();
  score.ties = (log_probs == score.log_prob).sum().item<int64_t>() - 1;
  return score;
}

// The running sums of one output over its cotangent rows: the exact norm's sum over one-hot rows,
// or Hutchinson's ProbeEstimate (which keeps its own sum, mean and variance).
class OutputSums {
 public:
  OutputSums(const MeasureOptions& options, int64_t width)
      : method_(options.method), rows_(options.method == Method::kExact ? width : options.probes) {
    sum_ = torch::zeros({options.length}, torch::kDouble);
    value_sum_ = torch::zeros_like(sum_);
    score_sum_ = torch::zeros_like(sum_);
    if (method_ == Method::kHutchinson) probes_.emplace(options.probe_distribution, options.probes, width, options.length);
  }
  // Squared norms [rows, L] (float64) of rows [first_row, first_row + rows).
  void Add(int64_t first_row, const torch::Tensor& squares) {
    if (probes_) {
      probes_->Add(first_row, squares);
    } else {
      sum_ += squares.sum(0);
    }
  }
  void AddPathways(const torch::Tensor& value_squares, const torch::Tensor& score_squares) {
    value_sum_ += value_squares.sum(0);
    score_sum_ += score_squares.sum(0);
  }
  void AppendTo(SampleSums& sums, bool both) const {
    const double scale = method_ == Method::kExact ? 1.0 : 1.0 / static_cast<double>(rows_);
    sums.sq_norm.push_back(probes_ ? probes_->Mean() : sum_);
    if (probes_) sums.probe_var.push_back(probes_->VarianceOfMean());
    if (both) {
      sums.value_sq_norm.push_back(value_sum_ * scale);
      sums.score_sq_norm.push_back(score_sum_ * scale);
    }
  }

 private:
  Method method_;
  int64_t rows_;
  torch::Tensor sum_, value_sum_, score_sum_;
  std::optional<ProbeEstimate> probes_;
};

// Which Jacobians one pass over a sample computes.
enum class PassKind { kFull, kValueOnly, kBoth };

class Runner {
 public:
  Runner(DecoderModel& model, const MeasureOptions& options, const torch::Device& device, int64_t target,
         bool checkpoint, bool model_pass, const models::AttentionBlocks& blocks)
      : model_(model), options_(options), device_(device), target_(target), checkpoint_(checkpoint),
        model_pass_(model_pass), blocks_(blocks), probe_generator_(at::detail::createCPUGenerator(options.seed)) {}

  // Probes of sample s come from their own seeded stream, so a resumed run draws the same ones.
  void StartSample(int64_t s) {
    probe_generator_ = at::detail::createCPUGenerator(options_.seed ^ (0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(s + 1)));
    probe_rows_.reset();
  }

  // Cotangent rows for chunk [start, start + rows) of `total`, padded to `batch` rows with zeros.
  torch::Tensor Cotangents(int64_t start, int64_t rows, int64_t batch, int64_t width) {
    auto cot = torch::zeros({batch, width}, NormDtype(options_.dtype));
    if (options_.method == Method::kExact) {
      for (int64_t i = 0; i < rows; ++i) cot[i][start + i] = 1.0;
    } else {
      if (!probe_rows_) probe_rows_.emplace(options_.probe_distribution, options_.probes, width);
      cot.narrow(0, 0, rows).copy_(probe_rows_->Next(start, rows, probe_generator_));
    }
    return cot.to(device_, options_.dtype);
  }

  // `kind`: the full Jacobian, the value pathway (attention probabilities detached), or both
  // for the same cotangent rows (their difference is the score pathway's Jacobian).
  absl::StatusOr<SampleSums> RunSample(const Sample& sample, int64_t batch, int64_t rows_per_call,
                                       const std::function<bool()>& tick, PassKind kind) {
    if (model_pass_) return RunSampleWithModelPass(sample, rows_per_call, batch, tick, kind);
    torch::AutoGradMode enable_grad(true);  // Whatever mode the caller is in.
    const int64_t width = OutputWidth(model_, options_.output);
    const int64_t total = options_.method == Method::kExact ? width : options_.probes;
    auto e = sample.embeds.to(device_, options_.dtype).expand({batch, -1, -1}).clone().set_requires_grad(true);
    const bool both = kind == PassKind::kBoth;
    torch::Tensor target_hidden;
    auto ys = Outputs(model_, e, options_, target_, sample, checkpoint_, kind == PassKind::kValueOnly, &target_hidden);
    std::vector<torch::Tensor> value_ys;
    if (both) value_ys = Outputs(model_, e, options_, target_, sample, checkpoint_, true);
    SampleSums sums;
    if (options_.score_next_token) sums.next_token = ScoreNextToken(model_, target_hidden, sample.NextToken(target_));
    for (size_t o = 0; o < ys.size(); ++o) {
      OutputSums output_sums(options_, width);
      for (int64_t start = 0; start < total; start += batch) {
        const int64_t rows = std::min(batch, total - start);
        auto cot = Cotangents(start, rows, batch, width);
        const bool last = o + 1 == ys.size() && start + batch >= total;
        auto grad = torch::autograd::grad({ys[o]}, {e}, {cot}, /*retain_graph=*/!last)[0];
        Accumulate(start, grad.narrow(0, 0, rows), output_sums);
        if (both) {
          auto value = torch::autograd::grad({value_ys[o]}, {e}, {cot}, /*retain_graph=*/!last)[0];
          AccumulatePathways(grad.narrow(0, 0, rows), value.narrow(0, 0, rows), output_sums);
        }
        if (!tick()) return absl::CancelledError("measurement cancelled");
      }
      output_sums.AppendTo(sums, both);
    }
    return sums;
  }

  // The same sums through the model's own reverse pass, `rows_per_call` cotangent rows per call
  // (all of them where memory allows, so that exact norms can use the MLP's Jacobians), the
  // products over `rows_per_product` rows; one tick per layer. Cotangents on the final hidden
  // state or a layer's residual stream go in directly; the log-probability's scalar cotangent c
  // becomes c * d log p / d hidden_t (one autograd call through the output head per sample).
  absl::StatusOr<SampleSums> RunSampleWithModelPass(const Sample& sample, int64_t rows_per_call,
                                                    int64_t rows_per_product, const std::function<bool()>& tick,
                                                    PassKind kind) {
    models::ReversePassOptions pass_options;
    pass_options.keep_activations = !checkpoint_;
    pass_options.attention_block = blocks_.forward;
    bool cancelled = false;
    // The forward's attention beats too: at long L one layer's forward takes seconds.
    if (heartbeat_) pass_options.between_blocks = [&] { return !(cancelled = !heartbeat_()); };
    auto pass = model_.PrepareReversePass(sample.embeds.to(device_, options_.dtype), target_, pass_options);
    if (cancelled || pass->Stopped()) return absl::CancelledError("measurement cancelled");
    const int64_t width = OutputWidth(model_, options_.output);
    const int64_t total = options_.method == Method::kExact ? width : options_.probes;
    torch::Tensor head_gradient;  // d log p / d hidden_t [1, d], log-probability output only.
    torch::Tensor loss_head;      // d loss / d hidden [T, d] at every position, loss gradient only.
    if (options_.output == Output::kLossGradient) loss_head = LossHeadGradient(model_, pass->FinalHiddenStates(), sample.tokens);
    if (options_.output == Output::kLogProb) {
      torch::AutoGradMode enable_grad(true);
      auto hidden = pass->FinalHidden().detach().unsqueeze(0).set_requires_grad(true);
      auto logits = model_.Logits(hidden.unsqueeze(1)).squeeze(1);
      auto log_prob = torch::log_softmax(logits.to(torch::kFloat32), -1).select(1, sample.NextToken(target_));
      head_gradient = torch::autograd::grad({log_prob.sum()}, {hidden})[0];
    }
    models::GradientOptions gradient_options;
    gradient_options.rows_per_product = rows_per_product;
    gradient_options.attention_block = blocks_.reverse;
    gradient_options.detach_attention_probabilities = kind == PassKind::kValueOnly;
    const bool both = kind == PassKind::kBoth;
    models::GradientOptions value_options = gradient_options;
    value_options.detach_attention_probabilities = true;
    gradient_options.between_layers = [&] { return !(cancelled = !tick()); };
    // Between the attention's query blocks (many per layer at long L): cancellation is seen and
    // progress moves within a layer too.
    if (heartbeat_) gradient_options.between_blocks = [&] { return !(cancelled = !heartbeat_()); };
    value_options.between_blocks = gradient_options.between_blocks;
    const int64_t outputs = options_.output == Output::kLayerSweep ? model_.config().num_layers : 1;
    SampleSums sums;
    if (options_.score_next_token) sums.next_token = ScoreNextToken(model_, pass->FinalHidden(), sample.NextToken(target_));
    for (int64_t o = 0; o < outputs; ++o) {
      const int64_t layer = options_.output == Output::kLayerSweep ? o + 1 : models::InputReversePass::kFinalHidden;
      OutputSums output_sums(options_, width);
      for (int64_t start = 0; start < total; start += rows_per_call) {
        const int64_t rows = std::min(rows_per_call, total - start);
        auto cot = Cotangents(start, rows, rows, width);
        if (head_gradient.defined()) cot = cot * head_gradient;  // [rows, 1] x [1, d].
        auto grad = loss_head.defined()
                        ? pass->SequenceInputGradients(cot.view({rows, 1, 1}) * loss_head.unsqueeze(0), gradient_options)
                        : pass->InputGradients(cot, layer, gradient_options);
        if (cancelled) return absl::CancelledError("measurement cancelled");
        Accumulate(start, grad, output_sums);
        if (both) {
          auto value = pass->InputGradients(cot, layer, value_options);
          if (cancelled) return absl::CancelledError("measurement cancelled");
          AccumulatePathways(grad, value, output_sums);
        }
      }
      output_sums.AppendTo(sums, both);
    }
    return sums;
  }

  int64_t vjps() const { return vjps_; }
  // Called between attention blocks of the model's own pass; false cancels (as a chunk's tick).
  void SetHeartbeat(std::function<bool()> heartbeat) { heartbeat_ = std::move(heartbeat); }

 private:
  // Adds the squared norms per position of gradients [rows, L, d] (one VJP per row, rows
  // first_row.. of the output's cotangents).
  void Accumulate(int64_t first_row, const torch::Tensor& grads, OutputSums& sums) {
    sums.Add(first_row, grads.to(NormDtype(options_.dtype)).pow(2).sum(-1).to(torch::kCPU, torch::kDouble));
    vjps_ += grads.size(0);
  }

  // The same rows' value-pathway gradients next to the full ones: ||g_value||^2 and the score
  // pathway's ||g_full - g_value||^2 per position (the difference is taken before squaring, so
  // the interference term 2 <J_value, J_score> is what is left of ||g_full||^2).
  void AccumulatePathways(const torch::Tensor& full, const torch::Tensor& value, OutputSums& sums) {
    const auto dtype = NormDtype(options_.dtype);
    auto value_wide = value.to(dtype);
    sums.AddPathways(value_wide.pow(2).sum(-1).to(torch::kCPU, torch::kDouble),
                     (full.to(dtype) - value_wide).pow(2).sum(-1).to(torch::kCPU, torch::kDouble));
    vjps_ += value.size(0);
  }

  DecoderModel& model_;
  const MeasureOptions& options_;
  torch::Device device_;
  int64_t target_;
  bool checkpoint_;
  bool model_pass_;
  models::AttentionBlocks blocks_;  // The planner's (batch_plan.h); the passes use them as given.
  std::function<bool()> heartbeat_;
  at::Generator probe_generator_;
  std::optional<ProbeRows> probe_rows_;  // Hutchinson's rows, made on first use (their width).
  int64_t vjps_ = 0;
};

// Parameters need no gradients during a measurement; restored on scope exit.
class FrozenParameters {
 public:
  explicit FrozenParameters(DecoderModel& model) {
    for (auto& [name, tensor] : model.NamedParameters()) {
      if (tensor.requires_grad()) frozen_.push_back(tensor), tensor.set_requires_grad(false);
    }
  }
  ~FrozenParameters() {
    for (auto& tensor : frozen_) tensor.set_requires_grad(true);
  }
 private:
  std::vector<torch::Tensor> frozen_;
};

// One computed sample as a record: per-output squared norms (probe means for Hutchinson), the
// variance of the probe mean, and the branch ratios of its forward pass.
SampleRecord Record(DecoderModel& model, const MeasureOptions& options, const Sample& sample,
                    const SampleSums& sums, const torch::Device& device) {
  SampleRecord record;
  for (const auto& t : sums.sq_norm) record.sq_norm.push_back(ToVector(t));
  for (const auto& t : sums.probe_var) record.probe_var.push_back(ToVector(t));
  for (const auto& t : sums.value_sq_norm) record.value_sq_norm.push_back(ToVector(t));
  for (const auto& t : sums.score_sq_norm) record.score_sq_norm.push_back(ToVector(t));
  record.next_token = sums.next_token;
  if (options.branch_ratios && model.config().family != models::Family::kTorchScript) {
    torch::NoGradGuard no_grad;
    models::ForwardOptions forward;
    forward.record_branch_ratios = true;
    record.branch_ratio = model.Forward(sample.embeds.to(device, options.dtype), forward).branch_ratio;
  }
  return record;
}

// How a measurement runs: the reverse pass, the cotangent batches, and the progress units.
struct MeasurePlan {
  int64_t target = 0;             // 1-based output position.
  int64_t outputs = 1;            // Outputs per sample (layers for a sweep).
  bool model_pass = false;        // The model's own reverse pass, or autograd.
  bool checkpoint = false;        // Layers recomputed in the backward pass.
  int64_t batch = 1;              // Cotangent rows per backward pass (autograd).
  int64_t rows_per_call = 1;      // Rows per InputGradients call (the model's pass).
  models::AttentionBlocks blocks;  // The attention's blocks (the model's pass).
  int64_t chunks_per_sample = 0;  // Progress units of one pass over a sample.
  int64_t passes_per_sample = 1;  // 2 for compare_pathways through the model's pass.
  int64_t first_sample = 0, end_sample = 0;
  MemoryPrediction memory;        // The batch plan's prediction of the peak (batch_plan.h).
  std::optional<FlopCount> flops;  // One sample's FLOPs through the model's pass (flop_count.h).
};

MeasurePlan PlanMeasurement(DecoderModel& model, const MeasureOptions& options, const torch::Device& device) {
  MeasurePlan plan;
  plan.target = options.target == 0 ? options.length : options.target;
  const int64_t layers = model.config().num_layers;
  plan.outputs = options.output == Output::kLayerSweep ? layers : 1;
  const int64_t rows_total = options.method == Method::kExact ? OutputWidth(model, options.output) : options.probes;
  // The budget: the caller's, but never more than half of what the device has free now.
  const int64_t free_bytes = FreeMemoryBytes(device);
  BatchPlanInputs inputs;
  inputs.config = model.config();
  inputs.length = options.length;
  inputs.element_bytes = static_cast<int64_t>(torch::elementSize(options.dtype));
  inputs.rows_total = rows_total;
  inputs.budget_bytes = free_bytes > 0 ? std::min(options.memory_budget_bytes, free_bytes / 2) : options.memory_budget_bytes;
  inputs.model_pass = UsesModelPass(model, options);
  inputs.loss_over_positions = options.output == Output::kLossGradient;
  // compare_pathways through autograd keeps two forward graphs (full and value) per sample.
  if (options.compare_pathways && !inputs.model_pass) inputs.budget_bytes /= 2;
  inputs.requested_batch = options.cotangent_batch;
  inputs.checkpointing = options.checkpointing;
  inputs.on_cuda = device.is_cuda();
  inputs.norm_element_bytes = static_cast<int64_t>(torch::elementSize(NormDtype(options.dtype)));
  const BatchPlan batches = PlanBatches(inputs);
  plan.model_pass = inputs.model_pass;
  plan.checkpoint = batches.checkpoint;
  plan.batch = batches.batch;
  plan.rows_per_call = batches.rows_per_call;
  plan.blocks = batches.blocks;
  plan.memory = PredictMemory(inputs, batches, ParameterCount(model));
  if (plan.model_pass) {
    FlopInputs what;
    what.target = plan.target;
    what.layer_sweep = options.output == Output::kLayerSweep;
    what.log_prob = options.output == Output::kLogProb;
    what.value_only = options.pathway == Pathway::kValueOnly;
    what.compare_pathways = options.compare_pathways;
    plan.flops = PredictFlops(inputs, batches, what);
  }
  // Progress units: cotangent batches (autograd), or layers of one call (the model's pass).
  plan.chunks_per_sample =
      plan.model_pass ? ((rows_total + plan.rows_per_call - 1) / plan.rows_per_call) *
                            (options.output == Output::kLayerSweep ? layers * (layers + 1) / 2 : layers)
                      : plan.outputs * ((rows_total + plan.batch - 1) / plan.batch);
  // compare_pathways: the model's reverse pass ticks per layer for each pathway's call; autograd
  // ticks once per batch of both.
  plan.passes_per_sample = options.compare_pathways && plan.model_pass ? 2 : 1;
  plan.first_sample = options.first_sample;
  plan.end_sample = options.end_sample > 0 ? options.end_sample : options.samples;
  return plan;
}

// The per-sample loop: each sample of the plan's range not finished before (records holds the
// earlier ones) through one pass, its record appended; the batch halves and the sample is retried
// when memory runs out. Progress ticks per chunk; a false from it or from on_sample cancels.
absl::Status MeasureSamples(DecoderModel& model, const MeasureOptions& options, const torch::Device& device,
                            const std::vector<Sample>& samples, MeasurePlan& plan, Runner& runner,
                            std::vector<SampleRecord>& records) {
  Progress progress{0, (plan.end_sample - plan.first_sample) * plan.chunks_per_sample * plan.passes_per_sample, 0, 0.0};
  progress.chunks_done = static_cast<int64_t>(records.size()) * plan.chunks_per_sample * plan.passes_per_sample;
  progress.samples_done = static_cast<int64_t>(records.size());
  int64_t beats = 0;  // Heartbeats since the last chunk.
  auto tick = [&] {
    ++progress.chunks_done;
    beats = 0;
    progress.fraction = std::min(1.0, static_cast<double>(progress.chunks_done) / progress.chunks_total);
    return !options.progress || options.progress(progress);
  };
  // Within a chunk the fraction creeps towards the chunk's end (beats / (beats + L / 64): monotone,
  // never past it), so progress moves at every block even when a layer takes minutes.
  const double beats_scale = std::max(1.0, static_cast<double>(plan.target) / 64.0);
  runner.SetHeartbeat([&] {
    ++beats;
    const double within = static_cast<double>(beats) / (static_cast<double>(beats) + beats_scale);
    progress.fraction = std::min(1.0, (static_cast<double>(progress.chunks_done) + within) / progress.chunks_total);
    return !options.progress || options.progress(progress);
  });
  // compare_pathways: both pathways for the same cotangent rows in one pass.
  const PassKind kind = options.compare_pathways                 ? PassKind::kBoth
                        : options.pathway == Pathway::kValueOnly ? PassKind::kValueOnly
                                                                 : PassKind::kFull;
  for (int64_t s = plan.first_sample + static_cast<int64_t>(records.size()); s < plan.end_sample; ++s) {
    const Sample sample = WithEmbeddings(samples[s], model, options, device);
    // One pass over the sample (its probes restart from the sample's stream, so the value
    // pathway of compare_pathways sees the same probes as the full one).
    absl::StatusOr<SampleSums> sums;
    while (true) {
      runner.StartSample(s);
      try {
        sums = runner.RunSample(sample, plan.batch, plan.rows_per_call, tick, kind);
        break;
      } catch (const c10::Error& error) {
        if (!IsOutOfMemory(error) || (plan.batch == 1 && plan.rows_per_call == 1)) throw;
        plan.batch = std::max<int64_t>(1, plan.batch / 2);  // Halve and retry this sample.
        plan.rows_per_call = std::max<int64_t>(1, plan.rows_per_call / 2);
      }
    }
    if (!sums.ok()) return sums.status();
    records.push_back(Record(model, options, sample, *sums, device));
    ++progress.samples_done;
    if (options.on_sample && !options.on_sample(s, records.back())) return absl::CancelledError("measurement cancelled");
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::vector<int64_t>> DrawTokenIds(int64_t vocab_size, const MeasureOptions& options) {
  torch::NoGradGuard no_grad;
  auto generator = at::detail::createCPUGenerator(options.seed);
  std::vector<std::vector<int64_t>> tokens(options.samples);
  for (auto& sample : tokens) {
    auto ids = torch::randint(vocab_size, {options.length + 1}, generator);
    sample.assign(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + options.length + 1);
  }
  return tokens;
}

absl::StatusOr<MeasureResult> Measure(DecoderModel& model, const MeasureOptions& options) {
  if (auto status = CheckMeasureOptions(model, options); !status.ok()) return status;
  struct ReturnMemoryAtEnd {
    ~ReturnMemoryAtEnd() { ReturnFreeMemory(); }
  } return_memory_at_end;
  // The loss gradient's autograd graph holds a dense [heads, L, L] per layer and frees it in pieces
  // of every size: retained, they would stay in the process beyond what the pass holds at any time
  // (and beyond its memory model).
  const LargeBlocksMapped large_blocks(options.device == "cpu" &&
                                       (MapsLargeBlocks(options.length, model.config().hidden_size) ||
                                        options.output == Output::kLossGradient));
  const auto start_time = std::chrono::steady_clock::now();
  try {
    const torch::Device device(options.device);
    if (device.is_cuda() && !torch::cuda::is_available()) {
      return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kDeviceUnavailable,
                             absl::StrCat("device ", options.device, " requested but CUDA is not available"));
    }
    model.To(device, options.dtype);
    FrozenParameters frozen(model);
    const std::vector<Sample> samples = DrawSamples(model, options);
    MeasurePlan plan = PlanMeasurement(model, options, device);
    Runner runner(model, options, device, plan.target, plan.checkpoint, plan.model_pass, plan.blocks);
    std::vector<SampleRecord> records(options.done_samples.begin(), options.done_samples.end());
    if (auto status = MeasureSamples(model, options, device, samples, plan, runner, records); !status.ok()) return status;

    MeasureResult result;
    for (const Sample& sample : samples) {
      if (!sample.tokens.empty()) result.tokens.push_back(sample.tokens);
    }
    result.length = options.length;
    result.target = plan.target;
    Summarize(records, options, plan.outputs, result);
    result.vjp_count = runner.vjps();
    result.cotangent_batch = plan.batch;
    result.checkpointed = plan.checkpoint;
    result.predicted_memory = plan.memory;
    if (plan.flops) {
      const double measured = static_cast<double>(plan.end_sample - plan.first_sample);
      result.predicted_flops = FlopCount{plan.flops->forward * measured, plan.flops->reverse * measured,
                                         plan.flops->recompute * measured};
    }
    result.reverse_pass = plan.model_pass ? "model" : "autograd";
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
    result.device_name = device.str();
    result.dtype_name = TorchDtypeName(options.dtype);
    result.torch_version = TORCH_VERSION;
    return result;
  } catch (const c10::Error& error) {
    if (IsOutOfMemory(error)) {
      return ErrorWithReason(absl::StatusCode::kResourceExhausted, ErrorReason::kInsufficientMemory,
                             absl::StrCat("out of memory even with one cotangent row: ", error.what_without_backtrace()));
    }
    return ErrorWithReason(absl::StatusCode::kInternal, ErrorReason::kInternalError,
                           absl::StrCat("measurement failed: ", error.what_without_backtrace()));
  }
}

}  // namespace posbias::jacobian
