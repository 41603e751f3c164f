// ThreadSanitizer annotations for Debian's prebuilt abseil synchronization
// (linked into every program of a ZS_SANITIZE=thread build).
//
// Debian's libabsl_synchronization.so is not built with TSan, so TSan cannot
// see that absl::Mutex, absl::CondVar and absl::Notification order memory:
// every access guarded by an absl::Mutex would be reported as a race. This
// file interposes the out-of-line members our code (and libgrpc, which locks
// through the same symbols) calls: each definition here tells TSan what the
// call does (__tsan_mutex_* / __tsan_acquire / __tsan_release) around the
// real implementation, found with dlsym(RTLD_NEXT).
//
// Built as a static library in every build (so both builds compile it) and,
// in a ZS_SANITIZE=thread build, as libzs_tsan_absl_preload.so, which
// scripts/sanitize.sh puts in LD_PRELOAD for the TSan test run: that way it
// also reaches the zeroshard-server processes the tests start, and libgrpc's
// own locking. The TSan entry points are weak, so the library does nothing
// (and loads fine) in a process without TSan, such as ctest itself.
//
// What is modelled: Lock/Unlock, ReaderLock/ReaderUnlock, the Try forms;
// Await* and CondVar::Wait* as an unlock followed by a lock, with the
// condition wrapped so that it acquires the mutex before it reads anything;
// Notify as a release that the WaitForNotification* calls (and
// HasBeenNotified's atomic load) acquire. Not modelled: LockWhen-style calls
// whose condition reads guarded data before the lock is reported taken (our
// code does not use them; see tests/sanitizers/tsan.supp if that changes).
#include <dlfcn.h>
#include <link.h>
#include <sanitizer/tsan_interface.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

#pragma weak __tsan_mutex_pre_lock
#pragma weak __tsan_mutex_post_lock
#pragma weak __tsan_mutex_pre_unlock
#pragma weak __tsan_mutex_post_unlock
#pragma weak __tsan_acquire
#pragma weak __tsan_release

#define ZS_STR2(x) #x
#define ZS_STR(x) ZS_STR2(x)

namespace {

// The real definition of `member` ("5Mutex4LockEv"; a leading 'K' for a
// const member) in the abseil library, by its mangled name.
void* Real(const char* member) {
  const std::string ns = ZS_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const bool is_const = member[0] == 'K';
  const std::string name = std::string(is_const ? "_ZNK" : "_ZN") + "4absl" +
                           std::to_string(ns.size()) + ns +
                           (is_const ? member + 1 : member);
  void* f = dlsym(RTLD_NEXT, name.c_str());
  if (f == nullptr) {
    std::fprintf(stderr, "absl_sync_tsan: no %s in the abseil library\n",
                 name.c_str());
    std::abort();
  }
  return f;
}

template <typename F>
F RealFn(const char* member) {
  return reinterpret_cast<F>(Real(member));
}

using MuFn = void (*)(absl::Mutex*);
using MuBoolFn = bool (*)(absl::Mutex*);
using AwaitFn = void (*)(absl::Mutex*, const absl::Condition&);
using AwaitTimeoutFn = bool (*)(absl::Mutex*, const absl::Condition&,
                                absl::Duration);
using AwaitDeadlineFn = bool (*)(absl::Mutex*, const absl::Condition&,
                                 absl::Time);
using CvWaitFn = void (*)(absl::CondVar*, absl::Mutex*);
using CvTimeoutFn = bool (*)(absl::CondVar*, absl::Mutex*, absl::Duration);
using CvDeadlineFn = bool (*)(absl::CondVar*, absl::Mutex*, absl::Time);
using NoteFn = void (*)(absl::Notification*);
using NoteWaitFn = void (*)(const absl::Notification*);
using NoteTimeoutFn = bool (*)(const absl::Notification*, absl::Duration);
using NoteDeadlineFn = bool (*)(const absl::Notification*, absl::Time);

// The address range of the program's own code (the first object
// dl_iterate_phdr reports), which holds everything instrumented: our code
// is linked in statically. Only calls from there are annotated. Calls that
// abseil makes to its own members are not (some go through the PLT, and so
// through this file, and some do not: annotating them would see, e.g.,
// Notification's internal unlock without its lock), nor are calls from
// this file (a real member tail-calling another, as AwaitWithTimeout jumps
// to AwaitWithDeadline, returns straight here), nor those of libgrpc,
// which is not instrumented either: its accesses are not seen, so its
// locks need not be.
struct Range {
  uintptr_t lo = 0, hi = 0;
  bool Contains(uintptr_t a) const { return a >= lo && a < hi; }
};
Range ProgramRange() {
  Range r;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        Range* out = static_cast<Range*>(data);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD) continue;
          const uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
          const uintptr_t hi = lo + ph.p_memsz;
          if (out->lo == 0 || lo < out->lo) out->lo = lo;
          if (hi > out->hi) out->hi = hi;
        }
        return 1;  // the program comes first
      },
      &r);
  return r;
}

// Whether the current interposed call is one to annotate (set by Scope).
thread_local bool t_annotate = false;

// TSan is in this process (its entry points resolved).
bool Tsan() { return &__tsan_mutex_pre_lock != nullptr; }

// For the duration of one interposed call: annotate when TSan is present
// and the caller is the program's own code.
class Scope {
 public:
  explicit Scope(void* caller) : saved_(t_annotate) {
    static const Range program = ProgramRange();
    t_annotate =
        Tsan() && program.Contains(reinterpret_cast<uintptr_t>(caller));
  }
  ~Scope() { t_annotate = saved_; }

 private:
  bool saved_;
};
#define ZS_SCOPE Scope scope(__builtin_return_address(0))

void PreLock(void* mu, unsigned flags) {
  if (t_annotate) __tsan_mutex_pre_lock(mu, flags);
}
void PostLock(void* mu, unsigned flags) {
  if (t_annotate) __tsan_mutex_post_lock(mu, flags, 0);
}
void PreUnlock(void* mu, unsigned flags) {
  if (t_annotate) __tsan_mutex_pre_unlock(mu, flags);
}
void PostUnlock(void* mu, unsigned flags) {
  if (t_annotate) __tsan_mutex_post_unlock(mu, flags);
}
void Acquire(const void* addr) {
  if (t_annotate) __tsan_acquire(const_cast<void*>(addr));
}
void Release(const void* addr) {
  if (t_annotate) __tsan_release(const_cast<void*>(addr));
}

void Released(void* mu) {
  PreUnlock(mu, 0);
  PostUnlock(mu, 0);
}
void Taken(void* mu) {
  PreLock(mu, 0);
  PostLock(mu, 0);
}

// A condition that first acquires its mutex for TSan: absl evaluates an
// Await condition inside the library after taking the lock back (and in
// the unlocking thread), before Await returns to the annotation after it.
struct AnnotatedCondition {
  const absl::Condition* cond;
  absl::Mutex* mu;
};
// Evaluated with the real lock held, in the waiter or the unlocking thread:
// a critical section of its own.
bool EvalAnnotated(AnnotatedCondition* c) {
  Acquire(c->mu);
  const bool ok = c->cond->Eval();
  Release(c->mu);
  return ok;
}

// Notification's atomic flag, which the inline HasBeenNotified loads: the
// member after the Mutex (absl/synchronization/notification.h).
void* NotifiedFlag(const absl::Notification* n) {
  return const_cast<char*>(reinterpret_cast<const char*>(n)) +
         sizeof(absl::Mutex);
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  ZS_SCOPE;
  static const auto real = RealFn<MuFn>("5Mutex4LockEv");
  PreLock(this, 0);
  real(this);
  PostLock(this, 0);
}

void Mutex::Unlock() {
  ZS_SCOPE;
  static const auto real = RealFn<MuFn>("5Mutex6UnlockEv");
  PreUnlock(this, 0);
  real(this);
  PostUnlock(this, 0);
}

void Mutex::ReaderLock() {
  ZS_SCOPE;
  static const auto real = RealFn<MuFn>("5Mutex10ReaderLockEv");
  PreLock(this, __tsan_mutex_read_lock);
  real(this);
  PostLock(this, __tsan_mutex_read_lock);
}

void Mutex::ReaderUnlock() {
  ZS_SCOPE;
  static const auto real = RealFn<MuFn>("5Mutex12ReaderUnlockEv");
  PreUnlock(this, __tsan_mutex_read_lock);
  real(this);
  PostUnlock(this, __tsan_mutex_read_lock);
}

bool Mutex::TryLock() {
  ZS_SCOPE;
  static const auto real = RealFn<MuBoolFn>("5Mutex7TryLockEv");
  PreLock(this, __tsan_mutex_try_lock);
  const bool ok = real(this);
  PostLock(this,
           __tsan_mutex_try_lock | (ok ? 0 : __tsan_mutex_try_lock_failed));
  return ok;
}

bool Mutex::ReaderTryLock() {
  ZS_SCOPE;
  static const auto real = RealFn<MuBoolFn>("5Mutex13ReaderTryLockEv");
  const unsigned flags = __tsan_mutex_read_lock | __tsan_mutex_try_lock;
  PreLock(this, flags);
  const bool ok = real(this);
  PostLock(this, flags | (ok ? 0 : __tsan_mutex_try_lock_failed));
  return ok;
}

void Mutex::Await(const Condition& cond) {
  ZS_SCOPE;
  static const auto real = RealFn<AwaitFn>("5Mutex5AwaitERKNS0_9ConditionE");
  AnnotatedCondition annotated{&cond, this};
  Released(this);
  real(this, absl::Condition(&EvalAnnotated, &annotated));
  Taken(this);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  ZS_SCOPE;
  static const auto real = RealFn<AwaitTimeoutFn>(
      "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  AnnotatedCondition annotated{&cond, this};
  Released(this);
  const bool ok =
      real(this, absl::Condition(&EvalAnnotated, &annotated), timeout);
  Taken(this);
  return ok;
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  ZS_SCOPE;
  static const auto real = RealFn<AwaitDeadlineFn>(
      "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  AnnotatedCondition annotated{&cond, this};
  Released(this);
  const bool ok =
      real(this, absl::Condition(&EvalAnnotated, &annotated), deadline);
  Taken(this);
  return ok;
}

void CondVar::Wait(Mutex* mu) {
  ZS_SCOPE;
  static const auto real = RealFn<CvWaitFn>("7CondVar4WaitEPNS0_5MutexE");
  Released(mu);
  real(this, mu);
  Taken(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  ZS_SCOPE;
  static const auto real = RealFn<CvTimeoutFn>(
      "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  Released(mu);
  const bool timed_out = real(this, mu, timeout);
  Taken(mu);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  ZS_SCOPE;
  static const auto real =
      RealFn<CvDeadlineFn>("7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  Released(mu);
  const bool timed_out = real(this, mu, deadline);
  Taken(mu);
  return timed_out;
}

void Notification::Notify() {
  ZS_SCOPE;
  static const auto real = RealFn<NoteFn>("12Notification6NotifyEv");
  Release(this);
  Release(NotifiedFlag(this));
  real(this);
}

void Notification::WaitForNotification() const {
  ZS_SCOPE;
  static const auto real =
      RealFn<NoteWaitFn>("K12Notification19WaitForNotificationEv");
  real(this);
  Acquire(this);
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  ZS_SCOPE;
  static const auto real = RealFn<NoteTimeoutFn>(
      "K12Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  const bool ok = real(this, timeout);
  if (ok) Acquire(this);
  return ok;
}

bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  ZS_SCOPE;
  static const auto real = RealFn<NoteDeadlineFn>(
      "K12Notification31WaitForNotificationWithDeadlineENS0_4TimeE");
  const bool ok = real(this, deadline);
  if (ok) Acquire(this);
  return ok;
}

ABSL_NAMESPACE_END
}  // namespace absl
