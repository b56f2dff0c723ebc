//! A request's accounting as one owned value: its meter (usage record, trace, budget
//! reservation), its rate-limit permit and its fleet pin. However a request ends — an answer
//! relayed to its end, an error, the client going away at any await — it settles here and only
//! here: the relay takes the meter and permit over with the answer (`hand_over`), an error
//! settles them with its status (`fail`), and a drop settles what is left as "nothing
//! generated". No phase settles anything by hand.

use http::HeaderValue;

use super::Call;
use crate::auth::Identity;
use crate::http::metering::Meter;
use crate::http::parse::RoutedRequest;
use crate::limit::{BudgetPermit, Permit};
use crate::route::backend::Backend;
use crate::shared::affinity::FleetPin;
use crate::telemetry::Tracing;

pub(super) struct Settlement {
    /// Boxed: the meter rides with the answer's body, which is moved several times on its way to
    /// the client; a pointer is cheaper to move than the meter's ~800 bytes. None when neither
    /// usage recording nor telemetry is on.
    meter: Option<Box<Meter>>,
    /// The key's permit when the request is not metered (a metered request's is in its meter).
    permit: Option<Permit>,
    /// Where the fleet has this conversation pinned; told where the request went.
    pin: Option<FleetPin>,
}

/// What the relay carries to the end of the answer.
pub(super) struct Relayed {
    pub meter: Option<Box<Meter>>,
    pub permit: Option<Permit>,
}

impl Settlement {
    /// Open the request's accounts once it is admitted.
    pub fn open(
        call: &Call<'_>,
        identity: &Identity,
        routed: &RoutedRequest,
        admitted: (Option<Permit>, Option<BudgetPermit>),
        trace: &mut Option<Tracing>,
    ) -> Settlement {
        let app = call.app;
        // With telemetry on, a request is metered even when usage is not recorded: its trace ends with it.
        let traced = app.telemetry.clone().zip(trace.take());
        let (permit, budget) = admitted;
        if app.journal.is_none() && traced.is_none() {
            return Settlement { meter: None, permit, pin: None };
        }
        let mut meter = Box::new(Meter::new(
            app.journal.clone(),
            app.config.clone(),
            app.metrics.clone(),
            call.request_id.to_str().unwrap_or_default(),
            identity.key(),
            &routed.requested,
            &routed.model,
            routed.body.len(),
            call.started,
            app.clock.unix_ms(),
        ));
        if let Some(redactor) = &app.redactor {
            meter.keep_bodies(routed.body.clone(), app.config.console.max_stored_body_bytes, redactor.clone());
        }
        if let Some((telemetry, mut tracing)) = traced {
            if let Tracing::Recorded(trace) = &mut tracing {
                trace.stream = routed.stream;
            }
            meter.trace(telemetry, tracing);
        }
        if !call.endpoint.spec().charged {
            meter.uncharged();
        }
        if let Some(guard) = call.guard_call {
            meter.guard_call(guard);
        }
        if let Some(batch) = call.batch {
            meter.batch(batch);
        }
        if let Some((experiment, variant)) = call.experiment {
            meter.experiment(experiment, variant);
        }
        let units = call.endpoint.spec().units;
        if units != crate::endpoint::Units::Tokens {
            meter.units(units, &routed.body);
        }
        meter.set_permit(permit, budget);
        Settlement { meter: Some(meter), permit: None, pin: None }
    }

    pub fn meter(&mut self) -> Option<&mut Meter> {
        self.meter.as_deref_mut()
    }

    /// The fleet's pin for this conversation (looked up before routing).
    pub fn pin(&mut self, pin: Option<FleetPin>) {
        self.pin = pin;
    }

    /// An attempt goes to `backend`, for the reason `route` says.
    pub fn went_to(&mut self, backend: &Backend, route: Option<&HeaderValue>) {
        if let (Some(m), Some(why)) = (self.meter.as_mut(), route) {
            m.route(why);
        }
        if let Some(pin) = self.pin.as_mut() {
            pin.went_to(backend.name());
        }
    }

    /// The request falls back to `model`: it is the model served now, and the fleet's pin (which
    /// names a backend of the first model) no longer applies.
    pub fn serve(&mut self, model: &str) {
        if let Some(m) = self.meter.as_mut() {
            m.serve(model);
        }
        self.pin = None;
    }

    /// The key's rate-limit state as of admission (`x-ratelimit-*`).
    pub fn insert_limit_headers(&self, headers: &mut http::HeaderMap) {
        super::headers::insert_limit_headers(headers, &self.meter, &self.permit);
    }

    /// An answer goes to the client: its body settles the accounts when it ends.
    pub fn hand_over(&mut self) -> Relayed {
        Relayed { meter: self.meter.take(), permit: self.permit.take() }
    }

    /// The request ended with `status` and nothing relayed: nothing was generated, so the
    /// token reservation goes back and the record says so.
    pub fn fail(&mut self, status: u16) {
        if let Some(mut p) = self.permit.take() {
            p.settle(0);
        }
        if let Some(mut m) = self.meter.take() {
            m.failed(status);
        }
    }
}

impl Drop for Settlement {
    /// The client went away before an answer: settle as a failure with no status.
    fn drop(&mut self) {
        self.fail(0);
    }
}
