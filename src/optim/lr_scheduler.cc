// Learning-rate schedules: PyTorch's closed forms of the initial lr.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "dtensor/optim.h"

namespace dtensor::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  // PyTorch's group.setdefault("initial_lr", lr): a second scheduler on the
  // same optimizer (SequentialLR's pieces) starts from the same lrs.
  for (size_t g = 0; g < optimizer.num_groups(); ++g) {
    if (!optimizer.initial_lr(g)) optimizer.set_initial_lr(g, optimizer.lr(g));
    base_lrs_.push_back(*optimizer.initial_lr(g));
  }
}

double LRScheduler::lr_at(int64_t epoch, size_t group) const {
  DT_CHECK(group < base_lrs_.size(), "LRScheduler: param group ", group, " out of range for ",
           base_lrs_.size(), " groups");
  return lr_for(base_lrs_[group], epoch);
}

void LRScheduler::apply(int64_t epoch) {
  last_epoch_ = epoch;
  last_lrs_.clear();
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    last_lrs_.push_back(lr_at(epoch, g));
    optimizer_.set_lr(g, last_lrs_.back());
  }
}

void LRScheduler::start() { apply(0); }

void LRScheduler::set_last_epoch(int64_t epoch) {
  DT_CHECK(epoch >= 0, "LRScheduler::set_last_epoch: expected an epoch >= 0, got ", epoch);
  apply(epoch);
}

void LRScheduler::step() { apply(last_epoch_ + 1); }

LambdaLR::LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> lr_lambda)
    : LRScheduler(optimizer), lambda_(std::move(lr_lambda)) {
  DT_CHECK(static_cast<bool>(lambda_), "LambdaLR: expected a function, got an empty one");
  start();
}

double LambdaLR::lr_for(double base_lr, int64_t epoch) const { return base_lr * lambda_(epoch); }

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor,
                   int64_t total_iters)
    : LRScheduler(optimizer), start_(start_factor), end_(end_factor), total_(total_iters) {
  DT_CHECK(start_factor > 0 && start_factor <= 1,
           "LinearLR: expected 0 < start_factor <= 1, got ", start_factor);
  DT_CHECK(end_factor >= 0 && end_factor <= 1, "LinearLR: expected 0 <= end_factor <= 1, got ",
           end_factor);
  DT_CHECK(total_iters >= 1, "LinearLR: expected total_iters >= 1, got ", total_iters);
  start();
}

double LinearLR::lr_for(double base_lr, int64_t epoch) const {
  const double t = static_cast<double>(std::min(epoch, total_));
  return base_lr * (start_ + (end_ - start_) * t / static_cast<double>(total_));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), t_max_(T_max), eta_min_(eta_min) {
  DT_CHECK(T_max >= 1, "CosineAnnealingLR: expected T_max >= 1, got ", T_max);
  start();
}

double CosineAnnealingLR::lr_for(double base_lr, int64_t epoch) const {
  const double x = std::numbers::pi * static_cast<double>(epoch) / static_cast<double>(t_max_);
  return eta_min_ + (base_lr - eta_min_) * (1 + std::cos(x)) / 2;
}

SequentialLR::SequentialLR(Optimizer& optimizer,
                           std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer), schedulers_(std::move(schedulers)),
      milestones_(std::move(milestones)) {
  DT_CHECK(!schedulers_.empty(), "SequentialLR: expected at least one scheduler, got none");
  DT_CHECK(milestones_.size() + 1 == schedulers_.size(), "SequentialLR: expected ",
           schedulers_.size() - 1, " milestones for ", schedulers_.size(), " schedulers, got ",
           milestones_.size());
  for (size_t i = 0; i < schedulers_.size(); ++i)
    DT_CHECK(schedulers_[i] != nullptr, "SequentialLR: scheduler ", i, " is null");
  for (size_t i = 1; i < milestones_.size(); ++i)
    DT_CHECK(milestones_[i - 1] < milestones_[i], "SequentialLR: expected ascending milestones, got ",
             milestones_[i - 1], " before ", milestones_[i]);
  start();
}

double SequentialLR::lr_for(double base_lr, int64_t epoch) const {
  // PyTorch: idx = bisect_right(milestones, epoch); scheduler idx restarts
  // at 0 on its milestone.
  const size_t idx = static_cast<size_t>(
      std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin());
  const int64_t local = idx == 0 ? epoch : epoch - milestones_[idx - 1];
  return schedulers_[idx]->lr_for(base_lr, local);
}

}  // namespace dtensor::optim
