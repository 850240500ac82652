// SPDX-License-Identifier: MIT
// `moesim model info`: parameter, weight and FLOP accounting of one model.
#pragma once

#include <cstdint>
#include <string>

#include "model/model_spec.hpp"

namespace moesim {

std::string model_info_text(const std::string& file, const ModelSpec& model, int64_t seq_len);
std::string model_info_json(const std::string& file, const ModelSpec& model, int64_t seq_len);

}  // namespace moesim
