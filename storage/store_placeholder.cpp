// Placeholder until the store lands (issue 4).
namespace engram::storage {}
