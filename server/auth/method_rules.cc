#include "server/auth/method_rules.h"

namespace posbias::auth {

const std::vector<std::pair<std::string_view, MethodRule>>& AllMethodRules() {
  static const auto* rules = new std::vector<std::pair<std::string_view, MethodRule>>{
      {"/posbias.v1.DensityService/EvaluateContinuum", {Role::kReader, false}},
      {"/posbias.v1.DensityService/EvaluateDiscrete", {Role::kReader, false}},
      {"/posbias.v1.DensityService/SummarizeProfile", {Role::kReader, false}},
      {"/posbias.v1.DensityService/FitProfile", {Role::kReader, false}},
      {"/posbias.v1.ModelService/RegisterModel", {Role::kOperator, true}},
      {"/posbias.v1.ModelService/UploadModel", {Role::kOperator, true}},
      {"/posbias.v1.ModelService/GetModel", {Role::kReader, false}},
      {"/posbias.v1.ModelService/ListModels", {Role::kReader, false}},
      {"/posbias.v1.ModelService/DeleteModel", {Role::kOperator, true}},
      {"/posbias.v1.ModelService/ExportModel", {Role::kOperator, false}},
      {"/posbias.v1.ModelService/ListPresets", {Role::kReader, false}},
      {"/posbias.v1.ModelService/Tokenize", {Role::kReader, false}},
      {"/posbias.v1.JobService/SubmitJob", {Role::kSubmitter, true}},
      {"/posbias.v1.JobService/GetJob", {Role::kReader, false}},
      {"/posbias.v1.JobService/ListJobs", {Role::kReader, false}},
      {"/posbias.v1.JobService/CancelJob", {Role::kSubmitter, true}},
      {"/posbias.v1.JobService/DeleteJob", {Role::kSubmitter, true}},
      {"/posbias.v1.JobService/WatchJob", {Role::kReader, false}},
      {"/posbias.v1.JobService/GetJobResult", {Role::kReader, false}},
  };
  return *rules;
}

std::optional<MethodRule> RuleFor(std::string_view full_method) {
  for (const auto& [method, rule] : AllMethodRules()) {
    if (method == full_method) return rule;
  }
  return std::nullopt;
}

}  // namespace posbias::auth
