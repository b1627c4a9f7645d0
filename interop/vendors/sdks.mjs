// The vendors' official Node SDKs (pinned in package.json), each pointed at
// Ratchet's reverse proxy with its own base-URL option, and the one call
// each suite test makes: a payment, an ACH transfer, a payment order, an
// email. call() resolves to {ok: true, id, headers} or {ok: false, err}
// with the SDK's own error (its class, status, code and message) as the
// application would see it.

import http from 'node:http';
import https from 'node:https';

import { MollieApiError, createMollieClient } from '@mollie/api-client';
import Increase from 'increase';
import ModernTreasury from 'modern-treasury';
import { Resend } from 'resend';

export const SDKS = {
  mollie: {
    sdk: '@mollie/api-client',
    errorClass: 'MollieApiError',
    path: '/v2/payments',
    codeOf: (body) => body.title, // where its refusal body carries Ratchet's code
    refusalType: 'application/hal+json', // its definition's refusal.content_type
    // apiEndpoint is its base URL. It sends through an https.Agent it makes
    // itself (with a CA bundle of its own), so an http:// base URL fails
    // with 'Protocol "http:" not supported': the one change the suite
    // makes to it is to have it make a plain agent for Ratchet's loopback
    // listener. Everything else (its keys, retries, errors) is its own.
    client(base) {
      const Agent = https.Agent;
      https.Agent = http.Agent;
      try {
        return createMollieClient({ apiKey: 'test_dHar4XY7LxsDOtmnkVtjNVWXLSlXsM', apiEndpoint: `${base}/mollie/v2/` });
      } finally {
        https.Agent = Agent;
      }
    },
    amount: (major) => ({ amount: { currency: 'EUR', value: major.toFixed(2) } }),
    async call(client, { key, major }) {
      try {
        const p = await client.payments.create({
          ...this.amount(major), description: 'Order #66', redirectUrl: 'https://shop.example/return',
          customerId: 'cst_8wmqcHMN4U', ...(key && { idempotencyKey: key }),
        });
        return { ok: true, id: p.id };
      } catch (err) {
        return { ok: false, err: { sdkError: err instanceof MollieApiError, status: err.statusCode, code: err.title, message: err.message } };
      }
    },
  },
  increase: {
    sdk: 'increase',
    errorClass: 'APIError',
    path: '/ach_transfers',
    codeOf: (body) => body.type,
    refusalType: 'application/json',
    client: (base) => new Increase({ apiKey: 'sandbox_key_1234567890', baseURL: `${base}/increase`, maxRetries: 2 }),
    amount: (major) => ({ amount: Math.round(major * 100) }),
    async call(client, { key, major, retries }) {
      try {
        const { data, response } = await client.achTransfers.create({
          account_id: 'account_in71c4amph0vgo2qllky', ...this.amount(major), statement_descriptor: 'Invoice 1042',
          external_account_id: 'external_account_ukk55lr923a3ac0pp7iv',
        }, { ...(key && { idempotencyKey: key }), ...(retries !== undefined && { maxRetries: retries }) }).withResponse();
        return { ok: true, id: data.id, headers: Object.fromEntries(response.headers) };
      } catch (err) {
        return { ok: false, err: { sdkError: err instanceof Increase.APIError, status: err.status, code: err.error?.type, message: err.message } };
      }
    },
  },
  moderntreasury: {
    sdk: 'modern-treasury',
    errorClass: 'APIError',
    path: '/api/payment_orders',
    codeOf: (body) => body.errors?.code,
    refusalType: 'application/json',
    client: (base) => new ModernTreasury({ organizationID: 'org_1234', apiKey: 'test_key_1234', baseURL: `${base}/moderntreasury`, maxRetries: 2 }),
    amount: (major) => ({ amount: Math.round(major * 100) }),
    async call(client, { key, major, retries }) {
      try {
        const { data, response } = await client.paymentOrders.create({
          type: 'ach', direction: 'credit', currency: 'USD', ...this.amount(major),
          originating_account_id: '0f8e3719-3dfd-4613-9bbf-c0333781b59f', receiving_account_id: '5acec2ef-987b-4260-aa97-b719eeb0a8d5',
        }, { ...(key && { idempotencyKey: key }), ...(retries !== undefined && { maxRetries: retries }) }).withResponse();
        return { ok: true, id: data.id, headers: Object.fromEntries(response.headers) };
      } catch (err) {
        // Its errors read as Modern Treasury documents them: {"errors": {"code", "message"}}.
        return { ok: false, err: { sdkError: err instanceof ModernTreasury.APIError, status: err.status,
          code: err.error?.errors?.code, message: err.message } };
      }
    },
  },
  resend: {
    sdk: 'resend',
    errorClass: 'ErrorResponse', // resend returns its errors as values: {data: null, error}
    path: '/emails',
    codeOf: (body) => body.name,
    refusalType: 'application/json',
    client: (base) => new Resend('re_123456789', { baseUrl: `${base}/resend` }),
    amount: () => ({}),
    async call(client, { key, to = 'delivered@resend.dev' }) {
      const { data, error, headers } = await client.emails.send({
        from: 'Acme <onboarding@resend.dev>', to: [to], subject: 'Your order', html: '<p>Thanks for your order.</p>',
      }, key ? { idempotencyKey: key } : undefined);
      if (error) {
        return { ok: false, err: { sdkError: typeof error.name === 'string' && 'statusCode' in error, status: error.statusCode, code: error.name, message: error.message } };
      }
      return { ok: true, id: data.id, headers };
    },
  },
};
