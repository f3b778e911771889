// Loading the model named on the command line (--model DIR or --shape NAME, --device, --dtype)
// with a progress bar on stderr (bytes and time).
#pragma once

#include <set>
#include <string>

#include "app/cli/cli_args.h"
#include "core/engine/loaded_model.h"

namespace engram::cli {

// Flags every model-using command accepts.
std::set<std::string> model_flags_with_value();

LoadedModel load_model_from_args(const Args& args, bool allow_shape);

// A --model folder for a command that works on text (encodes prompts): its tokenizer.model is
// required, the error names `command`.
LoadedModel load_text_model_from_args(const Args& args, const std::string& command);

}  // namespace engram::cli
