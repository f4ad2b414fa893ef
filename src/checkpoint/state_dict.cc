// get_state_dict / set_state_dict (torch.distributed.checkpoint.state_dict):
// a model, its optimizer and scheduler as one StateDict whose DTensors are
// the live tensors, so load() writes straight into them.
#include <algorithm>
#include <charconv>
#include <cmath>

#include "dtensor/checkpoint.h"
#include "dtensor/fsdp.h"
#include "dtensor/error.h"
#include "dtensor/nn.h"
#include "dtensor/optim.h"

namespace dtensor::checkpoint {

namespace {

// The model's name for each of the optimizer's parameters: the optimizer's
// own name when it has one, else the model parameter that is the same tensor.
std::vector<std::string> param_names(nn::Module& model, const optim::Optimizer& opt) {
  const auto named = model.named_parameters();
  std::vector<std::string> names;
  for (size_t i = 0; i < opt.size(); ++i) {
    if (!opt.name(i).empty()) {
      names.push_back(opt.name(i));
      continue;
    }
    const auto it = std::find_if(named.begin(), named.end(), [&](const auto& np) {
      return np.second->same_shards(opt.params()[i]);
    });
    DT_CHECK(it != named.end(), "checkpoint::get_state_dict: the optimizer's parameter ", i,
             " (", opt.params()[i].spec(), ") is none of the model's parameters; "
             "make the optimizer after parallelizing the model, or give it named parameters");
    names.push_back(it->first);
  }
  return names;
}

// The key of param group `group`'s value `what` ("lr", "initial_lr"):
// "optim.lr" for group 0 (as before param groups), "optim.group1.lr" after.
std::string group_key(size_t group, const std::string& what) {
  return group == 0 ? "optim." + what : "optim.group" + std::to_string(group) + "." + what;
}

const Value& value_at(const StateDict& state, const std::string& key) {
  const auto it = state.find(key);
  DT_CHECK(it != state.end() && std::holds_alternative<Value>(it->second),
           "checkpoint::set_state_dict: the state has no value '", key,
           "' (expected one from get_state_dict and load)");
  return std::get<Value>(it->second);
}

int64_t int_at(const StateDict& state, const std::string& key) {
  const Value& v = value_at(state, key);
  DT_CHECK(std::holds_alternative<int64_t>(v), "checkpoint::set_state_dict: '", key,
           "' is not an integer");
  return std::get<int64_t>(v);
}

double double_at(const StateDict& state, const std::string& key) {
  const Value& v = value_at(state, key);
  DT_CHECK(std::holds_alternative<double>(v), "checkpoint::set_state_dict: '", key,
           "' is not a number");
  return std::get<double>(v);
}

// The shortest decimal that reads back as the same double.
std::string exact(double x) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(x);
}

}  // namespace

StateDict get_state_dict(nn::Module& model, optim::Optimizer* optimizer,
                         optim::LRScheduler* scheduler) {
  // The parameters are the sharded leaves (an FSDP root's gathered values
  // dropped, as FSDP2's state-dict hook does), which the optimizer holds.
  reshard(model, /*recurse=*/true, /*if_any=*/true);
  StateDict state;
  for (auto& [name, p] : model.named_parameters()) state[name] = *p;
  if (optimizer != nullptr) {
    const std::vector<std::string> names = param_names(model, *optimizer);
    for (size_t i = 0; i < optimizer->size(); ++i) {
      optim::ParamState& ps = optimizer->state(i);
      const DTensor& param = optimizer->params()[i];
      // The buffers it declares (made now when missing) and any others it holds.
      std::vector<std::string> buffers = optimizer->buffer_names(optimizer->group_of(i));
      for (const auto& [buffer, value] : ps.buffers)
        if (std::find(buffers.begin(), buffers.end(), buffer) == buffers.end())
          buffers.push_back(buffer);
      for (const std::string& buffer : buffers) {
        const std::string key = "optim." + names[i] + "." + buffer;
        if (ps.has(buffer)) {
          state[key] = ps.buffers.at(buffer);
        } else {
          // A buffer the optimizer has not made yet (before its first
          // step) gets a place for load() to write, in the state dict
          // only: the optimizer itself must stay as it is (SGD's first
          // momentum step differs from a step with a zero buffer);
          // set_state_dict installs it when the loaded step count says so.
          state[key] = zeros(param.shape(), param.mesh(), param.placements(), param.dtype());
        }
      }
      state["optim." + names[i] + ".step"] = Value(ps.step);
    }
    for (size_t g = 0; g < optimizer->num_groups(); ++g) {
      state[group_key(g, "lr")] = Value(optimizer->lr(g));
      if (optimizer->initial_lr(g))
        state[group_key(g, "initial_lr")] = Value(*optimizer->initial_lr(g));
    }
  }
  if (scheduler != nullptr) state["lr_scheduler.last_epoch"] = Value(scheduler->last_epoch());
  return state;
}

void set_state_dict(const StateDict& state, nn::Module& model, optim::Optimizer* optimizer,
                    optim::LRScheduler* scheduler) {
  // The scheduler sets the lr from its epoch (below), so the lr the state
  // was saved with must be the schedule's at that epoch: else the resumed
  // run would go on with another lr than the saved one, silently. Checked
  // before anything is applied.
  if (optimizer != nullptr && scheduler != nullptr) {
    const int64_t epoch = int_at(state, "lr_scheduler.last_epoch");
    DT_CHECK(epoch >= 0, "checkpoint::set_state_dict: 'lr_scheduler.last_epoch' is negative: ",
             epoch);
    for (size_t g = 0; g < optimizer->num_groups(); ++g) {
      const std::string key = group_key(g, "lr");
      const double saved = double_at(state, key);
      const double scheduled = scheduler->lr_at(epoch, g);
      DT_CHECK(saved == scheduled || (std::isnan(saved) && std::isnan(scheduled)),
               "checkpoint::set_state_dict: the state's '", key, "' ", exact(saved),
               " is not the scheduler's lr at its 'lr_scheduler.last_epoch' ", epoch, " (",
               exact(scheduled), "): the epoch and the lr disagree (an edited state, or another "
               "schedule than the one saved)");
    }
  }
  if (optimizer != nullptr) {
    const std::vector<std::string> names = param_names(model, *optimizer);
    for (size_t i = 0; i < optimizer->size(); ++i) {
      optim::ParamState& ps = optimizer->state(i);
      ps.step = int_at(state, "optim." + names[i] + ".step");
      DT_CHECK(ps.step >= 0, "checkpoint::set_state_dict: 'optim.", names[i],
               ".step' is negative: ", ps.step);
      // Before its first step an optimizer has no buffers (SGD's first
      // momentum step differs from a step with a zero buffer); after it,
      // the buffers loaded into the state dict are the optimizer's.
      if (ps.step == 0) {
        ps.buffers.clear();
        continue;
      }
      const std::string prefix = "optim." + names[i] + ".";
      for (const auto& [key, entry] : state) {
        const auto* buffer = std::get_if<DTensor>(&entry);
        if (buffer == nullptr || key.rfind(prefix, 0) != 0) continue;
        const std::string name = key.substr(prefix.size());
        if (name.find('.') != std::string::npos) continue;  // another parameter's
        auto it = ps.buffers.find(name);
        if (it == ps.buffers.end())
          ps.buffers.emplace(name, *buffer);
        else if (!it->second.same_shards(*buffer))
          it->second.copy_(*buffer);
      }
    }
    for (size_t g = 0; g < optimizer->num_groups(); ++g) {
      if (state.count(group_key(g, "initial_lr")) != 0)
        optimizer->set_initial_lr(g, double_at(state, group_key(g, "initial_lr")));
      optimizer->set_lr(g, double_at(state, group_key(g, "lr")));
    }
  }
  // The scheduler sets the lr from its epoch, as PyTorch's does on its
  // next step; with a scheduler the lr saved is the same number.
  if (scheduler != nullptr) scheduler->set_last_epoch(int_at(state, "lr_scheduler.last_epoch"));
}

}  // namespace dtensor::checkpoint
