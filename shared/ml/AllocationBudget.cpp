#include <torch/torch.h>

#include "ml/AllocationBudget.h"

#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_map>

namespace gleaner::ml {

struct AllocationBudget::State
{
    explicit State(qint64 bytes) : limit(bytes) {}
    const qint64 limit;
    std::atomic<qint64> live{0};
    std::atomic<bool> exceeded{false};
};

namespace {

// The budget of this thread, if a check is running on it. Shared with the allocations it counted, which may
// be freed on any thread, after the budget ended.
thread_local std::shared_ptr<AllocationBudget::State> t_budget;

// The allocations made under a budget, by address: libtorch frees each through release() below, which gives
// its bytes back to the budget that counted it, however long it outlives that budget. Keyed by address rather
// than given a context of their own because oneDNN allocates through raw_allocate(), which wants the address
// to be the context, and frees through raw_deleter() whatever it got.
struct Counted
{
    c10::DataPtr inner;
    qint64 bytes;
    std::shared_ptr<AllocationBudget::State> state;
};

struct CountedTable
{
    std::mutex lock;
    std::unordered_map<void*, Counted> byAddress;
    std::atomic<qint64> size{0}; // read without the lock: nothing counted, nothing to look up
};

CountedTable& counted()
{
    static auto* table =
        new CountedTable; // never destroyed: tensors may be freed after static destructors ran
    return *table;
}

c10::DeleterFnPtr g_innerRawDeleter = nullptr;

// Frees a pointer of either kind: one counted under a budget, or one the inner allocator handed out as it
// was.
void release(void* data)
{
    CountedTable& table = counted();
    if (table.size.load() > 0) {
        std::unique_lock guard(table.lock);
        if (auto it = table.byAddress.find(data); it != table.byAddress.end()) {
            Counted entry = std::move(it->second);
            table.byAddress.erase(it);
            table.size.fetch_sub(1);
            guard.unlock();
            entry.state->live.fetch_sub(entry.bytes);
            return; // entry.inner frees the memory as it goes
        }
    }
    if (g_innerRawDeleter)
        g_innerRawDeleter(data);
}

// Installed once as libtorch's CPU allocator, in front of the one it had. Without a budget on the calling
// thread it hands the request straight to that allocator, pointer and deleter unchanged.
class BoundedCpuAllocator final : public c10::Allocator
{
public:
    explicit BoundedCpuAllocator(c10::Allocator* inner) : m_inner(inner) {}

    // libtorch 1.13 declares allocate() const and 2.x (2.3 on) without const, with copy_data() beside it:
    // both spellings are defined, and whichever the base class declares is the override. No `override`, so
    // the other is a plain member under either version.
    c10::DataPtr allocate(size_t bytes) const { return bounded(bytes); }
    c10::DataPtr allocate(size_t bytes) { return bounded(bytes); }
    void copy_data(void* dest, const void* src, std::size_t count) const { std::memcpy(dest, src, count); }
    c10::DeleterFnPtr raw_deleter() const override { return g_innerRawDeleter ? &release : nullptr; }

private:
    c10::DataPtr bounded(size_t bytes) const
    {
        const std::shared_ptr<AllocationBudget::State>& budget = t_budget;
        if (!budget)
            return m_inner->allocate(bytes);
        const qint64 live = budget->live.load();
        if (bytes > quint64(budget->limit) || live + qint64(bytes) > budget->limit) {
            budget->exceeded = true;
            TORCH_CHECK(false, "an allocation of ", bytes, " bytes would take this check past its limit of ",
                        budget->limit, " bytes");
        }
        c10::DataPtr inner = m_inner->allocate(bytes);
        void* data = inner.get();
        if (!data) // nothing to count or free: zero bytes
            return inner;
        const c10::Device device = inner.device();
        budget->live.fetch_add(qint64(bytes));
        CountedTable& table = counted();
        {
            const std::lock_guard guard(table.lock);
            table.byAddress.insert_or_assign(data, Counted{std::move(inner), qint64(bytes), budget});
            table.size.fetch_add(1);
        }
        return c10::DataPtr(data, data, &release, device);
    }

    c10::Allocator* m_inner;
};

void installOnce()
{
    static std::once_flag once;
    std::call_once(once, [] {
        // Never destroyed: tensors allocated through it may be freed at exit, after static destructors ran.
        c10::Allocator* inner = c10::GetCPUAllocator();
        g_innerRawDeleter = inner->raw_deleter();
        static auto* bounded = new BoundedCpuAllocator(inner);
        c10::SetCPUAllocator(bounded, /*priority=*/0);
    });
}

} // namespace

AllocationBudget::AllocationBudget(qint64 limitBytes) : m_state(std::make_shared<State>(limitBytes))
{
    installOnce();
    m_previous = std::move(t_budget);
    t_budget = m_state;
}

AllocationBudget::~AllocationBudget()
{
    t_budget = std::move(m_previous);
}

qint64 AllocationBudget::limit() const
{
    return m_state->limit;
}

bool AllocationBudget::exceeded() const
{
    return m_state->exceeded.load();
}

qint64 AllocationBudget::live() const
{
    return m_state->live.load();
}

} // namespace gleaner::ml
