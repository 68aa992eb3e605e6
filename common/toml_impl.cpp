// The one translation unit that compiles toml++ (everyone else includes it header-only off).
#define TOML_IMPLEMENTATION
#include <toml++/toml.h>
