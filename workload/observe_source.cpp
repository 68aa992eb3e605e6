// The process's observe source (workload/observe_source.hpp).
#include "workload/observe_source.hpp"

#include <atomic>

namespace rc::workload {
namespace {
std::atomic<ObserveSource*> gSource{nullptr};
}

void setObserveSource(ObserveSource* source) { gSource.store(source); }
ObserveSource* observeSource() { return gSource.load(); }

}  // namespace rc::workload
