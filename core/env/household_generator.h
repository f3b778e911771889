// Builds a household for a seed: five rooms (kitchen, living_room, bedroom, bathroom, study), a
// varying number of each receptacle, and portable things placed where they plausibly belong.
// The study is behind door_1, locked in most worlds; its key lies in a closed drawer or cabinet
// elsewhere. A locked safe (study or bedroom) holds valuables; its key is elsewhere, sometimes in
// the study, so reaching the safe can take two keys (the multi-hop chains of KEEP §4.2).
// The same seed gives the same world on every platform (seeded_rng.h).
#pragma once

#include <cstdint>

#include "core/env/household_world.h"

namespace engram::env {

World generate_world(uint64_t seed);

}  // namespace engram::env
