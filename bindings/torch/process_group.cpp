// ProcessGroupTutti's life: rendezvous through the c10d::Store, the worker thread, Work
// completion, timeouts and errors. The collectives themselves are in collectives.cpp.
#include "process_group.hpp"

#include <ATen/core/ivalue.h>
#include <Python.h>
#include <c10/util/Exception.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmath>
#include <sstream>

namespace tutti_torch {

namespace {

// Store keys, relative to the (already per-group prefixed) store torch hands over.
constexpr const char *kIdKey = "tutti/unique_id";

std::string local_host() {
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

// tutti's communicator timeout is a process-wide setting read once; when the user has not
// chosen one, the first process group's timeout becomes it, so tutti's own waits (a dead
// peer, a missing message) end within the timeout init_process_group was given.
void adopt_timeout(std::chrono::milliseconds timeout) {
  if (getenv("TUTTI_TIMEOUT") || getenv("NCCL_TIMEOUT")) return;
  long seconds = (long)std::ceil(timeout.count() / 1000.0);
  if (seconds < 1) seconds = 1;
  setenv("TUTTI_TIMEOUT", std::to_string(seconds).c_str(), 0);
}

// TUTTI_TORCH_INLINE_BYTES: the largest collective (bytes of its biggest buffer) that runs on the
// calling thread when the group is idle; 0 queues every call for the worker.
size_t inline_max_bytes() {
  const char *v = getenv("TUTTI_TORCH_INLINE_BYTES");
  if (!v || !*v) return (size_t)16 << 20;
  char *end = nullptr;
  unsigned long long n = strtoull(v, &end, 10);
  TORCH_CHECK(end && *end == '\0', "tutti: TUTTI_TORCH_INLINE_BYTES=", v,
              " is not a number of bytes");
  return (size_t)n;
}

}  // namespace

// ---- Work ----

WorkTutti::WorkTutti(ProcessGroupTutti *pg, c10d::OpType type, const char *name,
                     std::vector<at::Tensor> outputs)
    : c10d::Work(pg->getRank(), type),
      pg_(pg),
      name_(name),
      outputs_(std::move(outputs)),
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
}

void WorkTutti::complete(std::exception_ptr error) {
  if (error)
    future_->setError(error);
  else
    future_->markCompleted(c10::IValue(outputs_));
  finish(error);
}

// Waits at most `timeout` (0: the group's timeout). Past it the communicator is aborted, which
// ends the blocked call on the worker, and the wait raises.
bool WorkTutti::wait(std::chrono::milliseconds timeout) {
  if (timeout == ::kNoTimeout) timeout = pg_->timeout();
  std::unique_lock<std::mutex> lock(mutex_);
  if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
    lock.unlock();
    pg_->abort_after_timeout(name_);
    lock.lock();
    cv_.wait_for(lock, std::chrono::seconds(5), [&] { return completed_; });
    TORCH_CHECK(false, pg_->who(), ": ", name_, " did not complete within ",
                timeout.count() / 1000.0, " s; the communicator was aborted");
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

// ---- the group ----

ProcessGroupTutti::ProcessGroupTutti(const c10::intrusive_ptr<c10d::Store> &store, int rank,
                                     int size, std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(rank, size),
      timeout_(timeout),
      host_(local_host()),
      inline_max_bytes_(inline_max_bytes()) {
  adopt_timeout(timeout);
  rendezvous(store);
  worker_ = std::thread([this] { worker_loop(); });
  init();
}

// Rank 0 creates the unique id and publishes it; the others read it (Store::get waits, bounded
// by the store's timeout).
void ProcessGroupTutti::rendezvous(const c10::intrusive_ptr<c10d::Store> &store) {
  ncclUniqueId id;
  if (rank_ == 0) {
    ncclResult_t res = ncclGetUniqueId(&id);
    if (res != ncclSuccess) fail("ncclGetUniqueId", res);
    store->set(kIdKey, std::vector<uint8_t>(id.internal, id.internal + sizeof(id.internal)));
  } else {
    std::vector<uint8_t> bytes = store->get(kIdKey);
    TORCH_CHECK(bytes.size() == sizeof(id.internal), who(), ": malformed unique id in the store");
    memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }
  ncclResult_t res = ncclCommInitRank(&comm_, size_, id, rank_);
  if (res != ncclSuccess) fail("ncclCommInitRank", res);
}

ProcessGroupTutti::~ProcessGroupTutti() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) {
    // The worker may be dropping the last reference to a finished job's tensors, which takes
    // the GIL (a tensor Python no longer refers to still owns its Python object): a caller that
    // holds the GIL (destroy_process_group, the interpreter's exit) lets it go while it waits.
    if (Py_IsInitialized() && PyGILState_Check()) {
      PyThreadState *saved = PyEval_SaveThread();
      worker_.join();
      PyEval_RestoreThread(saved);
    } else {
      worker_.join();
    }
  }
  if (comm_) ncclCommDestroy(comm_);
}

std::string ProcessGroupTutti::who() const {
  std::ostringstream s;
  s << "tutti: rank " << rank_ << " of " << size_ << " (" << host_ << ")";
  return s.str();
}

void ProcessGroupTutti::fail(const char *op, ncclResult_t res) {
  const char *detail = ncclGetLastError(comm_);
  TORCH_CHECK(false, who(), ": ", op, " failed: ", ncclGetErrorString(res),
              detail && *detail ? ": " : "", detail ? detail : "");
}

void ProcessGroupTutti::abort_after_timeout(const char *op) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!broken_) {
    std::ostringstream s;
    s << who() << ": " << op << " did not complete within " << timeout_.count() / 1000.0
      << " s; the communicator was aborted";
    broken_ = std::make_exception_ptr(std::runtime_error(s.str()));
  }
  // ncclCommAbort sets the abort flag before it takes the communicator's lock, so a call
  // blocked on the worker returns; it then frees the communicator.
  if (comm_) ncclCommAbort(comm_), comm_ = nullptr;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::enqueue(c10::intrusive_ptr<WorkTutti> work,
                                                          size_t bytes, Job job) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (bytes > inline_max_bytes_ || running_ || !queue_.empty()) {
    queue_.emplace_back(work, std::move(job));
    lock.unlock();
    cv_.notify_one();
    return work;
  }
  // Inline: the group is idle, so this job is next in order; running_ holds later ones back.
  running_ = true;
  std::exception_ptr error = broken_;
  lock.unlock();
  error = run_job(job, error);
  lock.lock();
  running_ = false;
  bool queued = !queue_.empty();  // issued meanwhile by another thread
  lock.unlock();
  if (queued) cv_.notify_one();
  work->complete(error);
  return work;
}

// Runs one job unless the group is already broken; returns its error. A failed communicator
// (peer gone, timeout, abort) breaks the group; a rejected argument does not.
std::exception_ptr ProcessGroupTutti::run_job(const Job &job, std::exception_ptr broken) {
  if (broken) return broken;
  try {
    job();
    return nullptr;
  } catch (...) {
    std::exception_ptr error = std::current_exception();
    ncclResult_t async = ncclSuccess;
    std::lock_guard<std::mutex> lock(mutex_);
    if (!comm_ || (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess))
      if (!broken_) broken_ = error;
    return error;
  }
}

void ProcessGroupTutti::worker_loop() {
  for (;;) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return !running_ && (stop_ || !queue_.empty()); });
    if (queue_.empty()) return;  // stop_ with nothing left
    auto item = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    std::exception_ptr error = broken_;
    lock.unlock();
    error = run_job(item.second, error);
    lock.lock();
    running_ = false;  // before completing: whoever the completion wakes finds the group idle
    lock.unlock();
    item.first->complete(error);
  }
}

c10::intrusive_ptr<c10d::ProcessGroup> create_process_group(
    const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
    std::chrono::milliseconds timeout) {
  return c10::make_intrusive<ProcessGroupTutti>(store, rank, size, timeout);
}

}  // namespace tutti_torch
